"""The scheduler's memory of recent runs: the events each run published, bounded.

Plain state, no Dask: the preload's comm handler calls :meth:`RunBoard.publish`, the dashboard
pages call :meth:`RunBoard.latest` and :meth:`RunBoard.read`. Every event gets a sequence
number in its run, so a page keeps its place with one integer, as a reader of an
:class:`~workbench.events.EventLog` keeps its index, even after old events were dropped.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from collections import OrderedDict, deque
from dataclasses import dataclass, field

from workbench.dashboard.wire_rows import Event, events_of
from workbench.events.records import ScalarEvent

# Scalars (loss, lr: a few per step) and phases (several per device and step) are kept apart, so
# a long run's phases never push its loss curve out. 50,000 of each is the charts' own
# rollover (20,000 rows) with room, and a few MB per run.
SCALARS_KEPT = 50_000
PHASES_KEPT = 50_000
RUNS_KEPT = 4  # a scheduler that outlives many runs keeps only the newest few


@dataclass
class BoardRun:
    """One run as the scheduler has it: what it is (``description``: strategy, devices,
    batch_size, steps), its newest events with their sequence numbers, and whether it ended."""

    run_id: str
    description: dict
    scalars: deque = field(default_factory=lambda: deque(maxlen=SCALARS_KEPT))
    phases: deque = field(default_factory=lambda: deque(maxlen=PHASES_KEPT))
    received: int = 0  # events ever published: the next event's sequence number
    finished: bool = False
    step: int = 0  # steps done: one past the newest step any event names, as the run store counts

    def summary(self) -> dict:
        return {
            "description": dict(self.description),
            "received": self.received,
            "step": self.step,
            "kept": len(self.scalars) + len(self.phases),
            "finished": self.finished,
        }


def _newer(items: deque, since: int) -> list[tuple[int, Event]]:
    """The (sequence, event) pairs from ``since`` on; walks back only over the new ones."""
    newer = list(itertools.takewhile(lambda item: item[0] >= since, reversed(items)))
    newer.reverse()
    return newer


class RunBoard:
    """Recent runs by id, newest last.

    Examples
    --------
    >>> board = RunBoard()
    >>> from workbench.dashboard.wire_rows import event_rows
    >>> rows = event_rows([ScalarEvent("loss", 0, 2.3, 0.1)])
    >>> board.publish("run-1", rows, {"strategy": "mirrored", "batch_size": 32})
    1
    >>> events, position = board.read(board.latest(), since=0)
    >>> events[0].value, position
    (2.3, 1)
    """

    def __init__(self) -> None:
        self._runs: OrderedDict[str, BoardRun] = OrderedDict()
        # The comm handler and the pages both run on the scheduler's event loop; the lock is for
        # anyone reading from another thread (tests, a scheduler plugin).
        self._lock = threading.Lock()

    def publish(
        self,
        run_id: str,
        rows: list,
        description: dict | None = None,
        finished: bool = False,
    ) -> int:
        """Add a batch of events (as :func:`~workbench.dashboard.wire_rows.event_rows` sends
        them) to run ``run_id``; returns how many.

        A malformed row raises before anything of the batch is stored."""
        records = events_of(rows)
        with self._lock:
            run = self._runs.get(run_id)
            if run is None:
                run = self._runs[run_id] = BoardRun(run_id, dict(description or {}))
                self._forget_old_runs()
            for record in records:
                kept = run.scalars if isinstance(record, ScalarEvent) else run.phases
                kept.append((run.received, record))
                run.received += 1
                run.step = max(run.step, record.step + 1)
            run.finished = run.finished or finished
        return len(records)

    def _forget_old_runs(self) -> None:
        while len(self._runs) > RUNS_KEPT:
            # The oldest finished run goes first; if every run is live, the oldest one.
            finished = [run_id for run_id, run in self._runs.items() if run.finished]
            del self._runs[finished[0] if finished else next(iter(self._runs))]

    def latest(self) -> str | None:
        """The run that started last (the one the pages follow), or None before any run."""
        with self._lock:
            return next(reversed(self._runs), None)

    def run(self, run_id: str) -> BoardRun | None:
        with self._lock:
            return self._runs.get(run_id)

    def read(self, run_id: str, since: int) -> tuple[list[Event], int]:
        """The run's kept events with sequence number ``since`` or later, in publishing order,
        and the position to read from next time."""
        with self._lock:
            run = self._runs.get(run_id)
            if run is None:
                return [], since
            newer = heapq.merge(
                _newer(run.scalars, since), _newer(run.phases, since), key=lambda item: item[0]
            )
            return [event for _, event in newer], run.received

    def summary(self) -> dict[str, dict]:
        """Every kept run: its description, events received and kept, finished or not."""
        with self._lock:
            return {run_id: run.summary() for run_id, run in self._runs.items()}
