"""Runs on disk, so finished runs can be listed, reopened and compared from another kernel.

One directory per run under the store's root::

    <root>/<run id>/config.json    the run's flags (RunConfig.to_dict())
    <root>/<run id>/events.jsonl   every event (DESIGN 3.4), one JSON object per line, appended
                                   while the run goes
    <root>/<run id>/status.json    {"state": running | finished | stopped | failed, "error",
                                   "started", "ended", "step"}
    <root>/<run id>/summary.json   the ``--json`` summary, once the run has finished

The root is ``$DTRAIN_RUN_STORE`` if set, else the user's data directory
(``platformdirs.user_data_dir("dtrain-workbench")/runs``). Files that others read while a run
writes them (``status.json``, ``summary.json``) are written to a temporary name and renamed.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.events import EventLog
from workbench.events.records import PhaseEvent, ScalarEvent

STORE_ENVIRONMENT = "DTRAIN_RUN_STORE"
STATES = ("running", "finished", "stopped", "failed")


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

    def record(self, event: PhaseEvent | ScalarEvent) -> None:
        line = json.dumps(event.to_dict()) + "\n"
        with self._lock:
            if self._events.closed:
                return
            self._events.write(line)
            self._last_step = max(self._last_step, event.step)
            now = time.monotonic()
            if now - self._last_flush > 0.5:  # readers in other kernels see it within ~0.5 s
                self._events.flush()
                self._last_flush = now

    def finish(self, state: str, summary: dict | None = None, error: str | None = None) -> None:
        if state not in STATES:
            raise ValueError(f"state: {state!r} is not one of {', '.join(STATES)}")
        with self._lock:
            self._events.close()
        if summary is not None:
            _write_json_atomically(self.run.path / "summary.json", summary)
        status = self.run.status()
        status.update(state=state, error=error, ended=time.time(), step=self._last_step + 1)
        _write_json_atomically(self.run.path / "status.json", status)


class RunStore:
    """The directory of runs. ``RunStore()`` uses :func:`default_store_root`."""

    def __init__(self, root: str | os.PathLike | None = None) -> None:
        self.root = Path(root) if root is not None else default_store_root()

    def create(self, run_id: str, config: dict) -> RunRecorder:
        path = self.root / run_id
        path.mkdir(parents=True, exist_ok=False)
        _write_json_atomically(path / "config.json", config)
        status = {"state": "running", "error": None, "started": time.time(), "ended": None}
        _write_json_atomically(path / "status.json", {**status, "step": 0})
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

    def open(self, run_id: str) -> StoredRun:
        path = self.root / run_id
        if not (path / "status.json").exists():
            known = ", ".join(run.run_id for run in self.runs()) or "none"
            raise KeyError(f"run {run_id!r} is not in the store at {self.root} (runs: {known})")
        return StoredRun(run_id, path)
