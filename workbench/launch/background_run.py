"""A training run in a background thread of the kernel, and the table of this kernel's runs.

The notebook must stay responsive while a run trains (so its Stop button works), so a run is
prepared in the foreground, where every error on user input is raised before anything starts,
and trained in a daemon thread. The handle is what ``%dtrain -o NAME`` stores: ``wait()``,
``stop()``, ``metrics`` (a column table ``pandas.DataFrame`` takes as is), ``events`` and,
once finished, ``summary``. Every run is also recorded in the run store.

Its live panel is the notebook's: the notebook side registers how to make one
(:func:`register_run_viewer`) when it is imported, so this layer needs no widgets.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from workbench.config import RunConfig
from workbench.data import Dataset
from workbench.events import EventLog
from workbench.events.records import PhaseEvent, ScalarEvent
from workbench.launch.run_link import RunLink, new_run_id
from workbench.launch.runner import RunResult, prepare_run
from workbench.models import Sequential
from workbench.store import RunStore

# Makes the live panel of a run (an object with ``widget`` and ``_ipython_display_``); set by
# the notebook side when it is imported.
_run_viewer: Callable[[BackgroundRun], Any] | None = None


def register_run_viewer(make_panel: Callable[[BackgroundRun], Any]) -> None:
    global _run_viewer
    _run_viewer = make_panel


class BackgroundRun:
    """One run of this kernel. ``state``: running, finished, stopped or failed."""

    def __init__(
        self,
        config: RunConfig,
        model: Sequential | None = None,
        store: RunStore | None = None,
        progress: Callable[[str], None] | None = None,
        begin: bool = True,
        dataset: Dataset | None = None,
    ) -> None:
        # Raises on bad input; nothing started yet.
        prepared = prepare_run(config, model, dataset)
        self.config = prepared.config
        self.job = prepared.job
        self.run_id = new_run_id(self.config.strategy)
        self.log = EventLog()
        self.total_steps = prepared.job.total_steps
        self.first_step = prepared.job.first_step
        self.steps_per_epoch = prepared.job.sampler.steps_per_epoch
        self.lines: list[str] = []
        self.state = "running"
        self.error: BaseException | None = None
        self.result: RunResult | None = None
        self.started = time.time()
        self._stop = prepared.job.stop
        self._progress = progress
        self._done = threading.Event()
        self._panel = None
        self._link = RunLink(store or RunStore(), self.run_id, prepared.job, self.log)
        self._steps_done = self.first_step
        self.log.subscribe(self._count_steps)
        self._thread = threading.Thread(
            target=self._train, args=(prepared,), name=f"dtrain-{self.run_id}", daemon=True
        )
        if begin:
            self.begin()

    def begin(self) -> BackgroundRun:
        """Start training (the constructor does, unless ``begin=False``: then build what
        watches the run first, so building it does not compete with the training)."""
        self.started = time.time()
        self._link.start()
        self._thread.start()
        return self

    def _say(self, line: str) -> None:
        self.lines.append(line)
        if self._progress is not None:
            self._progress(line)

    def _train(self, prepared) -> None:
        try:
            self.result = self._link.train(prepared, self._say)
            self.state = "stopped" if self._stop.is_set() else "finished"
        except BaseException as error:  # reported through the handle, never lost in a thread
            self.error, self.state = error, "failed"
        finally:
            self._done.set()

    # What the user calls ------------------------------------------------------------------

    def wait(self, timeout: float | None = None) -> BackgroundRun:
        """Block until the run ends; re-raise its error if it failed."""
        if not self._done.wait(timeout):
            raise TimeoutError(f"run {self.run_id} still running after {timeout} s")
        if self.error is not None:
            raise self.error
        return self

    def stop(self) -> None:
        """Ask the run to stop after the step in flight (it then evaluates and ends)."""
        self._stop.set()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def summary(self) -> dict | None:
        return self.result.summary if self.result is not None else None

    @property
    def events(self) -> list[PhaseEvent | ScalarEvent]:
        return self.log.events

    def _count_steps(self, event) -> None:
        if isinstance(event, ScalarEvent) and event.name == "loss":
            self._steps_done = max(self._steps_done, event.step + 1)

    @property
    def step(self) -> int:
        """Global steps completed so far (the panel asks often: kept, not recounted)."""
        return self._steps_done

    @property
    def metrics(self) -> dict[str, list]:
        """Per-step scalars as columns (``pandas.DataFrame(run.metrics)``): step, then one
        column per scalar name, None where a step has no value."""
        by_step: dict[int, dict[str, float]] = {}
        names: list[str] = []
        for event in self.log.events:
            if isinstance(event, ScalarEvent):
                by_step.setdefault(event.step, {})[event.name] = event.value
                if event.name not in names:
                    names.append(event.name)
        steps = sorted(by_step)
        table: dict[str, list[Any]] = {"step": steps}
        for name in names:
            table[name] = [by_step[step].get(name) for step in steps]
        return table

    def panel(self):
        """The live panel (progress, status, Stop, charts); made once per run."""
        if self._panel is None:
            if _run_viewer is None:
                raise RuntimeError(
                    "the live panel is the notebook's: %load_ext workbench (or import "
                    "workbench.notebook) first"
                )
            self._panel = _run_viewer(self)
        return self._panel

    def _ipython_display_(self) -> None:
        if _run_viewer is None:
            print(repr(self))
        else:
            self.panel()._ipython_display_()

    def describe(self) -> str:
        loss = self.log.scalars("loss")  # on request only
        shown = f"loss {loss[-1].value:.4f}" if loss else "no step yet"
        return (
            f"{self.run_id}  {self.state:<8}  {self.config.strategy} x{self.config.devices}  "
            f"step {self.step}/{self.total_steps}  {shown}"
        )

    def __repr__(self) -> str:
        return f"<BackgroundRun {self.describe()}>"


class RunTable:
    """This kernel's runs, newest last; ``%dtrain list | stop | status`` read it."""

    def __init__(self) -> None:
        self._runs: dict[str, BackgroundRun] = {}

    def add(self, run: BackgroundRun) -> BackgroundRun:
        self._runs[run.run_id] = run
        return run

    def all(self) -> list[BackgroundRun]:
        return list(self._runs.values())

    def live(self) -> list[BackgroundRun]:
        return [run for run in self._runs.values() if not run.done]

    def find(self, run_id: str) -> BackgroundRun:
        matches = [run for key, run in self._runs.items() if key.startswith(run_id)]
        if len(matches) != 1:
            known = ", ".join(self._runs) or "none"
            what = "matches no run" if not matches else "matches several runs"
            raise KeyError(f"run id {run_id!r} {what} of this kernel (runs: {known})")
        return matches[0]
