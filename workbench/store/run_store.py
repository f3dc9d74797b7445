"""Runs on disk, so finished runs can be listed, reopened and compared from another kernel.

One directory per run under the store's root::

    <root>/<run id>/config.json    the run's flags (RunConfig.to_dict())
    <root>/<run id>/events.jsonl   every event (docs/architecture.md, "Events"), one JSON
                                   object per line, appended while the run goes
    <root>/<run id>/status.json    {"state": running | finished | stopped | failed, "error",
                                   "started", "ended", "step", "steps", "loss",
                                   "samples_per_second", "pid", "hostname", the fault counts
                                   (below), and what the run adds: "dashboard_link",
                                   "scheduler_address"}; rewritten about once a second while
                                   the run goes, and at once on a failure or a recovery
    <root>/<run id>/summary.json   the ``--json`` summary, once the run has finished
    <root>/<run id>/stop-requested present once someone (the JupyterLab sidebar) asked the run
                                   to stop; the process that trains it polls for it

The fault counts in status.json (:class:`~workbench.events.faults.FaultTally`, from the fault
events of docs/architecture.md, "Events"; 0 and [] for a run without faults, absent in runs
recorded before they existed):

- ``restarts``: restarts from a checkpoint so far (the ``restarts`` scalar);
- ``failures``: devices noticed dead or stalled so far (``failure`` phase events);
- ``dropped_updates``: gradient pushes the parameter server discarded so far (the
  ``dropped_updates`` scalar);
- ``recovery_seconds``: one number per restart, from the failure noticed to the first step
  after the restore.

The root is ``$DTRAIN_RUN_STORE`` if set, else the user's data directory
(``platformdirs.user_data_dir("dtrain-workbench")/runs``). Files that others read while a run
writes them (``status.json``, ``summary.json``) are written to a temporary name and renamed.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.events import EventLog
from workbench.events.faults import FaultTally
from workbench.events.records import PhaseEvent, ScalarEvent

STORE_ENVIRONMENT = "DTRAIN_RUN_STORE"
STATES = ("running", "finished", "stopped", "failed")
STOP_MARKER = "stop-requested"
STATUS_EVERY_S = 1.0  # how often a live run rewrites status.json (the sidebar's refresh)
THROUGHPUT_WINDOW_S = 5.0  # the samples/s in status.json is over this much recent time
# Fault events that rewrite status.json at once (there are a few per restart).
RESTART_EVENTS = ("failure", "recovery", "restarts", "recovery_seconds")


def default_store_root() -> Path:
    configured = os.environ.get(STORE_ENVIRONMENT)
    if configured:
        return Path(configured).expanduser()
    from platformdirs import user_data_dir

    return Path(user_data_dir("dtrain-workbench")) / "runs"


def _write_json_atomically(path: Path, value: Any) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    temporary.write_text(json.dumps(value, indent=2), encoding="utf-8")
    os.replace(temporary, path)


def event_from_dict(record: dict) -> PhaseEvent | ScalarEvent:
    fields = {key: value for key, value in record.items() if key != "kind"}
    return PhaseEvent(**fields) if record["kind"] == "phase" else ScalarEvent(**fields)


@dataclass(frozen=True)
class StoredRun:
    """A run as the store has it (live or finished)."""

    run_id: str
    path: Path

    def config(self) -> dict:
        return json.loads((self.path / "config.json").read_text(encoding="utf-8"))

    def status(self) -> dict:
        return json.loads((self.path / "status.json").read_text(encoding="utf-8"))

    def summary(self) -> dict | None:
        path = self.path / "summary.json"
        return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None

    def events(self) -> list[PhaseEvent | ScalarEvent]:
        """Every complete event line so far (a line still being written is skipped)."""
        path = self.path / "events.jsonl"
        if not path.exists():
            return []
        events = []
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                events.append(event_from_dict(json.loads(line)))
            except (json.JSONDecodeError, TypeError, KeyError):
                continue
        return events

    def read_events(self, offset: int = 0) -> tuple[list[PhaseEvent | ScalarEvent], int]:
        """The events written after byte ``offset`` and the offset to read from next time;
        a line still being written is left for the next read."""
        path = self.path / "events.jsonl"
        if not path.exists():
            return [], offset
        with path.open("rb") as file:
            file.seek(offset)
            chunk = file.read()
        complete = chunk[: chunk.rfind(b"\n") + 1]
        events = []
        for line in complete.splitlines():
            try:
                events.append(event_from_dict(json.loads(line)))
            except (json.JSONDecodeError, TypeError, KeyError):
                continue
        return events, offset + len(complete)

    def request_stop(self) -> None:
        """Ask the process training this run to stop after the step in flight."""
        (self.path / STOP_MARKER).touch()

    def stop_requested(self) -> bool:
        return (self.path / STOP_MARKER).exists()

    def event_log(self) -> EventLog:
        log = EventLog()
        for event in self.events():
            log.emit(event)
        return log


class RunRecorder:
    """Writes one run into the store as it goes: subscribe :meth:`record` to its event log."""

    def __init__(self, run: StoredRun) -> None:
        self.run = run
        self._events = (run.path / "events.jsonl").open("a", encoding="utf-8")
        self._lock = threading.Lock()
        self._last_step = -1
        self._last_flush = 0.0
        self._status = run.status()
        self._batch_size = int(run.config().get("batch_size") or 1)
        self._loss_times: deque[tuple[float, int]] = deque()  # (time, step) of recent losses
        self._faults = FaultTally()

    def record(self, event: PhaseEvent | ScalarEvent) -> None:
        line = json.dumps(event.to_dict()) + "\n"
        with self._lock:
            if self._events.closed:
                return
            self._events.write(line)
            self._last_step = max(self._last_step, event.step)
            if isinstance(event, ScalarEvent) and event.name == "loss":
                self._note_loss(event)
            urgent = self._note_fault(event)
            now = time.monotonic()
            if urgent or now - self._last_flush > STATUS_EVERY_S:  # seen elsewhere within ~1 s
                self._events.flush()
                self._last_flush = now
                self._status["step"] = self._last_step + 1
                _write_json_atomically(self.run.path / "status.json", self._status)

    def _note_fault(self, event: PhaseEvent | ScalarEvent) -> bool:
        """Count a fault event into the status; True if status.json should say so now."""
        if not self._faults.add(event):
            return False
        self._status.update(self._faults.status())
        # While a run restores no step comes to trigger the next rewrite: the sidebar would
        # show the failure only once the run is back. Dropped pushes can come every step.
        kind = event.phase if isinstance(event, PhaseEvent) else event.name
        return kind in RESTART_EVENTS

    def _note_loss(self, event: ScalarEvent) -> None:
        self._status["loss"] = event.value
        times = self._loss_times
        times.append((event.time, event.step))
        while times and times[0][0] < event.time - THROUGHPUT_WINDOW_S:
            times.popleft()
        (first_time, first_step), (last_time, last_step) = times[0], times[-1]
        if last_time > first_time:  # losses arrive in batches: a rate needs two arrival times
            rate = (last_step - first_step) * self._batch_size / (last_time - first_time)
            self._status["samples_per_second"] = rate

    def annotate(self, **fields: Any) -> None:
        """Add facts about the live run to status.json (e.g. its cluster's dashboard link)."""
        with self._lock:
            self._status.update(fields)
            _write_json_atomically(self.run.path / "status.json", self._status)

    def finish(self, state: str, summary: dict | None = None, error: str | None = None) -> None:
        if state not in STATES:
            raise ValueError(f"state: {state!r} is not one of {', '.join(STATES)}")
        with self._lock:
            self._events.close()
        if summary is not None:
            _write_json_atomically(self.run.path / "summary.json", summary)
        status = self._status
        status.update(state=state, error=error, ended=time.time(), step=self._last_step + 1)
        if summary is not None and summary.get("samples_per_second") is not None:
            status["samples_per_second"] = summary["samples_per_second"]
        _write_json_atomically(self.run.path / "status.json", status)


class RunStore:
    """The directory of runs. ``RunStore()`` uses :func:`default_store_root`."""

    def __init__(self, root: str | os.PathLike | None = None) -> None:
        self.root = Path(root) if root is not None else default_store_root()

    def private_root(self) -> Path:
        """The store's directory, made readable by its owner only when this makes it (runs
        hold configurations, data paths and losses; calibrations a cluster's layout)."""
        if not self.root.is_dir():
            self.root.mkdir(parents=True, mode=0o700, exist_ok=True)
            os.chmod(self.root, 0o700)  # mkdir's mode passes through the umask
        return self.root

    def create(self, run_id: str, config: dict, steps: int | None = None) -> RunRecorder:
        """A new run, ``running``; ``steps`` is how many global steps it will take."""
        path = self.private_root() / run_id
        path.mkdir(parents=True, exist_ok=False)
        _write_json_atomically(path / "config.json", config)
        status = {
            "state": "running",
            "error": None,
            "started": time.time(),
            "ended": None,
            "step": 0,
            "steps": steps,
            "loss": None,
            "samples_per_second": None,
            # Who trains it: a reader on this host can tell a run whose process died.
            "pid": os.getpid(),
            "hostname": socket.gethostname(),
            **FaultTally().status(),
        }
        _write_json_atomically(path / "status.json", status)
        return RunRecorder(StoredRun(run_id, path))

    def runs(self) -> list[StoredRun]:
        """Every run in the store, oldest first."""
        if not self.root.is_dir():
            return []
        found = [
            StoredRun(path.name, path)
            for path in self.root.iterdir()
            if (path / "status.json").exists()
        ]
        return sorted(found, key=lambda run: run.status().get("started") or 0)

    def calibration_path(self, signature: str) -> Path:
        """Where the calibration of the cluster named by ``signature`` is cached (beside the
        runs; not a run, so :meth:`runs` never lists it)."""
        return self.root / "calibrations" / f"{signature}.json"

    def load_calibration(self, signature: str) -> str | None:
        path = self.calibration_path(signature)
        return path.read_text(encoding="utf-8") if path.exists() else None

    def save_calibration(self, signature: str, text: str) -> None:
        self.private_root()
        path = self.calibration_path(signature)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, path)

    def open(self, run_id: str) -> StoredRun:
        path = self.root / run_id
        if not (path / "status.json").exists():
            known = ", ".join(run.run_id for run in self.runs()) or "none"
            raise KeyError(f"run {run_id!r} is not in the store at {self.root} (runs: {known})")
        return StoredRun(run_id, path)
