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

import contextlib
import shutil
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from workbench.config import RunConfig
from workbench.data import Dataset
from workbench.events import EventLog, warmup_steps
from workbench.events.records import PhaseEvent, ScalarEvent
from workbench.launch.run_link import RunLink, ended_state, new_run_id
from workbench.launch.runner import RunResult, prepare_run
from workbench.models import Sequential
from workbench.store import RunRecorder, RunStore, StoreError
from workbench.strategies import validate_config

RATE_WINDOW_S = 10.0  # the ETA's step rate: over the steps of about this many recent seconds

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
        # Raises on bad input; nothing started yet. The run is listed in the store (running,
        # step 0) as soon as its flags are checked, while its data set loads and its model is
        # built (its step count, unless --steps gave it, once the data set is loaded); a later
        # check that fails takes the record back, so nothing is left stored.
        store = store or RunStore()
        checked = validate_config(config)
        self.run_id = new_run_id(checked.strategy)
        recorder = store.create(self.run_id, checked.to_dict(), steps=checked.steps)
        try:
            prepared = prepare_run(checked, model, dataset)
            recorder.annotate(steps=prepared.job.total_steps)
        except BaseException:
            _discard(recorder)
            raise
        self.config = prepared.config
        self.job = prepared.job
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
        self._link = RunLink(store, self.run_id, prepared.job, self.log, recorder)
        self._steps_done = self.first_step
        self.rate = StepRate(self.first_step + warmup_steps(self.total_steps - self.first_step))
        # When the test point was logged: the devices are done (it is evaluated right after
        # the last step, before the cluster closes); None until then. With it, the test
        # (loss, accuracy).
        self.trained_at: float | None = None
        self.test_result: tuple[float, float] | None = None
        self._test_loss: float | None = None
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
            self.state = ended_state(prepared.job, self.result.summary)
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
    def dashboard_link(self) -> str | None:
        """The Dask dashboard of the run's cluster, once it is up (None: no cluster yet, or
        a one-device run)."""
        return self._link.dashboard_link

    @property
    def summary(self) -> dict | None:
        return self.result.summary if self.result is not None else None

    @property
    def events(self) -> list[PhaseEvent | ScalarEvent]:
        return self.log.events

    def _count_steps(self, event) -> None:
        if isinstance(event, ScalarEvent) and event.name == "loss":
            self._steps_done = max(self._steps_done, event.step + 1)
            self.rate.add(event.time, event.step + 1)
        elif isinstance(event, ScalarEvent) and event.name == "test_loss":
            self._test_loss = event.value
        elif isinstance(event, ScalarEvent) and event.name == "test_accuracy":
            self.test_result = (self._test_loss or 0.0, event.value)
            self.trained_at = time.time()

    def eta_seconds(self) -> float | None:
        """Seconds left at the step rate measured over the last ``RATE_WINDOW_S`` (warm-up
        steps and the cluster's start left out); None before there is a rate, or once done."""
        rate = self.rate.per_second()
        if self.done or self.trained_at is not None or not rate:
            return None
        return (self.total_steps - self.step) / rate

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
                    "the live panel is the notebook's: import workbench.notebook.panel first "
                    "(%load_ext workbench does when a run is shown)"
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


def _discard(recorder: RunRecorder) -> None:
    """Take back the record of a run that failed a check before it started."""
    with contextlib.suppress(StoreError):
        recorder.finish("failed")  # closes its events file
    shutil.rmtree(recorder.run.path, ignore_errors=True)


class StepRate:
    """Steps a second over the last ``window`` seconds of the run's loss events (by their
    times, when the run logged them), counting only steps after ``after``: the warm-up, as the
    summary's steady state leaves it out (``warmup_steps``), and with it the cluster's start."""

    def __init__(self, after: int, window: float = RATE_WINDOW_S) -> None:
        self.after, self.window = after, window
        self._samples: deque[tuple[float, int]] = deque()

    def add(self, when: float, steps_done: int) -> None:
        if steps_done <= self.after:
            return
        samples = self._samples
        samples.append((when, steps_done))
        # The oldest kept sample is the newest one at least a window old.
        while len(samples) > 2 and when - samples[1][0] >= self.window:
            samples.popleft()

    def per_second(self) -> float | None:
        samples = list(self._samples)  # appended to by the training thread
        if len(samples) < 2:
            return None
        (first_time, first_steps), (last_time, last_steps) = samples[0], samples[-1]
        if last_time <= first_time or last_steps <= first_steps:
            return None
        return (last_steps - first_steps) / (last_time - first_time)


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
