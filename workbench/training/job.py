"""What a strategy is asked to do: train this model on these batches for these steps."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from workbench.config import RunConfig
from workbench.costs import Calibration
from workbench.data import Dataset, GlobalBatchSampler, ModelInputs
from workbench.models import Sequential
from workbench.optim import LearningRateSchedule, Optimizer

Progress = Callable[[str], None]


class ClusterObserver(Protocol):
    """Something that watches a run's cluster without the engine knowing it: the front ends
    attach one (the dashboard's event publisher) to a job's ``observers``. ``scheduler_options``
    go to a cluster the workbench starts; ``watch`` is entered once the cluster is up and left
    before it closes."""

    def scheduler_options(self) -> dict: ...

    def watch(
        self, session: Any, strategy: str, job: TrainingJob, log: Any, progress: Progress
    ) -> AbstractContextManager: ...


@dataclass
class FaultRecord:
    """What went wrong during a run and what it cost (the ``--json`` summary reports it)."""

    restarts: int = 0  # recoveries from the last checkpoint
    steps_recomputed: int = 0  # completed steps after that checkpoint, run again
    recovery_seconds: list[float] = field(default_factory=list)  # failure -> first step after
    dropped_updates: int = 0  # gradient pushes a parameter server discarded
    devices: int | None = None  # an elastic run's device count at the end


@dataclass(frozen=True)
class TrainingJob:
    """A run's inputs, as ``prepare_run`` assembled them; read, never written, by everything
    that trains it (a variant is a copy: ``dataclasses.replace``). What the run finds out comes
    back in its :class:`TrainOutcome`; ``stop`` is the one control set while it goes."""

    config: RunConfig
    model: Sequential
    optimizer: Optimizer
    dataset: Dataset
    sampler: GlobalBatchSampler
    schedule: LearningRateSchedule
    first_step: int
    total_steps: int
    device_type: str  # cluster runs: as asked until the workers' reports decide it
    xp: Any  # the array module of a run in this process (one-device)
    initial_parameters: dict[str, np.ndarray] | None = None
    initial_optimizer_state: dict[str, np.ndarray] | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    # Wall-clock origin: events from worker processes (and hosts) share this time axis.
    clock_origin: float = field(default_factory=time.time)
    # Told when the run's cluster is up (the dashboard's publisher, the run's record).
    observers: list[ClusterObserver] = field(default_factory=list)
    # Where periodic checkpoints go (the run's directory in the run store); None: kept in
    # memory only, for recovery.
    checkpoint_directory: str | None = None
    # The run's id in the run store, the one the sidebar, the CLI and the dashboard pages show
    # (a cluster session's own id names only its shared memory); None: a run not recorded.
    run_id: str | None = None

    def clock(self) -> float:
        """Seconds since the run started: the time axis of every event."""
        return time.time() - self.clock_origin


@dataclass(frozen=True)
class RestorePoint:
    """Where a run's devices start: the step, and the variables and optimizer slots then
    (None: freshly initialised from the run's seed). A plan is made from one: the run's start
    (its ``--resume`` checkpoint, if any), or after a failure the last checkpoint."""

    step: int
    parameters: dict[str, np.ndarray] | None = None
    optimizer_state: dict[str, np.ndarray] | None = None

    @classmethod
    def start_of(cls, job: TrainingJob) -> RestorePoint:
        return cls(job.first_step, job.initial_parameters, job.initial_optimizer_state)


class TrainedModel(Protocol):
    """What a strategy hands back: the final variables, gathered on the host, and the step
    they are of when that is not the last completed step (``variables_step``, else None)."""

    variables_step: int | None

    def parameters(self) -> dict[str, np.ndarray]: ...

    def optimizer_state(self) -> dict[str, np.ndarray]: ...

    def evaluate(self, inputs, labels) -> tuple[float, float]: ...


@dataclass(frozen=True)
class TrainOutcome:
    """What a strategy's ``train`` hands back: the trained variables and what the run found
    out on the way, for the runner to summarise."""

    trained: TrainedModel
    device_type: str  # as the devices decided (a cluster run's workers' reports)
    faults: FaultRecord = field(default_factory=FaultRecord)
    calibration: Calibration | None = None  # what the run's devices were measured to cost
    calibration_seconds: float = 0.0  # what measuring took this run (0: all cached)
    # (test loss, test accuracy), when the run evaluated before its cluster closed
    test_result: tuple[float, float] | None = None


def evaluate_on_test(job: TrainingJob, trained: TrainedModel, log) -> tuple[float, float]:
    """Evaluate the trained model on the test split, and log ``test_loss`` and
    ``test_accuracy`` at the last trained step (the loss chart plots the first).

    Cluster runs call it before their cluster closes, so the test point also reaches the
    dashboard's pages, and hand the result back in their :class:`TrainOutcome`."""
    # The trained model's own array module: a cluster run's variables are gathered on the
    # host (NumPy) whatever its devices were.
    model, dataset, xp = job.model, job.dataset, getattr(trained, "xp", np)
    # Converted chunk by chunk as evaluation reads them (no float copy of the test set).
    dtype = "int64" if model.takes_integer_input else job.config.dtype
    inputs = ModelInputs(xp.asarray(dataset.x_test), dataset.input_scale, dtype)
    loss, accuracy = trained.evaluate(inputs, xp.asarray(dataset.y_test))
    losses = log.scalars("loss")
    last_step = losses[-1].step if losses else job.first_step
    log.scalar("test_loss", last_step, loss, job.clock())
    log.scalar("test_accuracy", last_step, accuracy, job.clock())
    return loss, accuracy


def epoch_progress(job: TrainingJob, step: int, loss: float, name: str) -> str | None:
    """A progress line at each epoch boundary and at the last step, else None."""
    return epoch_line(name, step, loss, job.sampler.steps_per_epoch, job.total_steps, job.clock())


def epoch_line(
    name: str, step: int, loss: float, per_epoch: int, total_steps: int, seconds: float
) -> str | None:
    """The progress line after ``step`` where it ends an epoch or the run, else None."""
    done = step + 1
    if done % per_epoch and done != total_steps:
        return None
    epoch = (done - 1) // per_epoch + 1
    epochs = -(-total_steps // per_epoch)
    return (
        f"[{name}] epoch {epoch}/{epochs}  step {done}/{total_steps}  "
        f"loss {loss:.4f}  {seconds:.1f}s"
    )
