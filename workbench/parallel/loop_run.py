"""What the client's loops over a run's steps take: the run as they read it
(:class:`LoopRun`), the tasks each device runs (:class:`StepTasks`) and where the rounds may
pause or report back (:class:`RoundHooks`).

The chunked step loop (:mod:`workbench.parallel.step_loop`) and the free-running
parameter-server driver (:mod:`workbench.parallel.parameter_server.free_running`) take the same
run and hooks, so a caller treats them alike; neither reads the whole training job.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from workbench.events import EventLog
from workbench.training.job import Progress, TrainingJob, epoch_line


@dataclass(frozen=True)
class LoopRun:
    """A run as its step loop reads it: how far it goes, how long a round may take, the Stop
    and the clock that times its events, its learning rate for the charts, and where its
    events and progress lines go (``name``: the strategy the lines are tagged with)."""

    name: str
    total_steps: int
    steps_per_epoch: int
    stall_timeout: float  # seconds beyond a round's usual time before it counts as stalled
    stop: threading.Event
    clock: Callable[[], float]
    learning_rate: Callable[[int], float]
    log: EventLog
    progress: Progress

    @classmethod
    def of(cls, job: TrainingJob, log: EventLog, progress: Progress, name: str) -> LoopRun:
        return cls(
            name=name,
            total_steps=job.total_steps,
            steps_per_epoch=job.sampler.steps_per_epoch,
            stall_timeout=job.config.stall_timeout,
            stop=job.stop,
            clock=job.clock,
            learning_rate=job.schedule,
            log=log,
            progress=progress,
        )

    def epoch_line(self, step: int, loss: float) -> str | None:
        """The progress line due after ``step`` (an epoch's end or the run's), else None."""
        return epoch_line(
            self.name, step, loss, self.steps_per_epoch, self.total_steps, self.clock()
        )


@dataclass(frozen=True)
class StepTasks:
    """What the devices ``ranks`` run each round: ``function(*arguments)``, with
    ``arguments_for(first step, count)`` giving each rank's arguments in order."""

    function: Callable
    arguments_for: Callable[[int, int], Sequence[tuple]]
    ranks: Sequence[int] | None = None  # None: every device of the session


class RoundHooks(Protocol):
    """Where a run's rounds stop for a checkpoint, and what follows each round."""

    def steps_until_pause(self, step: int) -> int | None:
        """At most how many steps a round starting at ``step`` runs (None: no bound)."""
        ...

    def pause_at(self, step: int) -> bool:
        """Whether the devices stop at ``step`` for :meth:`at_pause`."""
        ...

    def at_pause(self, step: int) -> None:
        """Use the devices stopped at ``step`` (a checkpoint's snapshot)."""
        ...

    def after_round(self, first: int, end: int, results: list) -> None:
        """Once the events of the round covering ``first`` .. ``end - 1`` are logged."""
        ...


class NoPauses:
    """Rounds that never pause and need nothing after them."""

    def steps_until_pause(self, step: int) -> int | None:
        return None

    def pause_at(self, step: int) -> bool:
        return False

    def at_pause(self, step: int) -> None:
        return None

    def after_round(self, first: int, end: int, results: list) -> None:
        return None


NO_PAUSES = NoPauses()
