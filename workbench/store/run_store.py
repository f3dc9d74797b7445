"""Runs on disk, so finished runs can be listed, reopened and compared from another kernel.

One directory per run under the store's root::

    <root>/<run id>/config.json    the run's flags (RunConfig.to_dict())
    <root>/<run id>/events.jsonl   every event (docs/architecture/events.md, "Events"), one JSON
                                   object per line, each line appended by one write (a
                                   reader ignores a last line without its newline)
    <root>/<run id>/status.json    {"state": running | finished | stopped | failed | lost
                                   (finished from the last step's loss on: the summary
                                   follows once the run is evaluated and its cluster closed),
                                   "error",
                                   "started", "ended", "step", "steps", "loss",
                                   "samples_per_second", "pid", "hostname", the fault counts
                                   (below), and what the run adds: "dashboard_link",
                                   "scheduler_address"}; rewritten within a tenth of a second
                                   of each step, and at once on a failure or a recovery
    <root>/<run id>/summary.json   the ``--json`` summary, once the run has finished
    <root>/<run id>/stop-requested present once someone (the JupyterLab sidebar) asked the run
                                   to stop; the process that trains it polls for it

The fault counts in status.json (:class:`~workbench.events.faults.FaultTally`, from the fault
events of docs/architecture/events.md, "Events"; 0 and [] for a run without faults, absent in runs
recorded before they existed):

- ``restarts``: restarts from a checkpoint so far (the ``restarts`` scalar);
- ``failures``: devices noticed dead or stalled so far (``failure`` phase events);
- ``dropped_updates``: gradient pushes the parameter server discarded so far (the
  ``dropped_updates`` scalar);
- ``recovery_seconds``: one number per restart, from the failure noticed to the first step
  after the restore;
- ``failure_reasons``: one short line per failure (the latest ones), e.g. ``step 12,
  task0-cpu0: StallError: ...; restarted from step 10``: where, why, and the step the run
  restarted from when it did. A run that failed keeps these beside its final ``error``.

``step`` is the global steps completed (one past the last step with a loss; at the end, the
``--json`` summary's ``first_step + steps``): what the run's handle and panel count too.

The root is ``$DTRAIN_RUN_STORE`` if set, else the user's data directory
(``platformdirs.user_data_dir("dtrain-workbench")/runs``), a directory only its owner may
enter: one that is another user's, a symbolic link or writable by others is refused
(:class:`~workbench.store.errors.StoreError`), for writing and reading alike. Every JSON file
is strict (non-finite numbers as null). Files that others read while a run writes them
(``status.json``, ``summary.json``) are written to a temporary name and renamed. Recording
that fails (a full disk) ends the run ``failed`` with the reason in status.json, written if
at all possible, and raises :class:`~workbench.store.errors.StoreError`. A run whose process
has gone is listed ``lost``, and status.json says so from the next listing by its owner on.
See docs/security/store.md, "Run store".
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import socket
import stat
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.events import EventLog
from workbench.events.faults import FaultTally
from workbench.events.records import PhaseEvent, ScalarEvent
from workbench.safe_io import ForeignPathError, ensure_private_directory, finite_or_none
from workbench.safe_io.private_paths import describe
from workbench.safe_io.strict_json import strict_dumps
from workbench.store.entries import DAMAGED, RunEntry
from workbench.store.errors import StoreError
from workbench.store.json_files import (
    non_finite_fields,
    overwrite_json,
    read_json,
    write_json_atomically,
)
from workbench.store.liveness import lost_reason, run_state
from workbench.store.run_ids import RUN_ID_RULE, valid_run_id

STORE_ENVIRONMENT = "DTRAIN_RUN_STORE"
STATES = ("running", "finished", "stopped", "failed")
STOP_MARKER = "stop-requested"
STATUS_EVERY_S = 0.1  # the longest a recorded step waits to be in status.json
THROUGHPUT_WINDOW_S = 5.0  # the samples/s in status.json is over this much recent time
# Fault events that rewrite status.json at once (there are a few per restart).
PENDING_EVENT_BYTES = 2**16  # events held in memory before they are written anyway
RESTART_EVENTS = ("failure", "recovery", "restarts", "recovery_seconds")


def default_store_root() -> Path:
    configured = os.environ.get(STORE_ENVIRONMENT)
    if configured:
        return Path(configured).expanduser()
    from platformdirs import user_data_dir

    return Path(user_data_dir("dtrain-workbench")) / "runs"


def event_from_dict(record: dict) -> PhaseEvent | ScalarEvent:
    fields = {key: value for key, value in record.items() if key != "kind"}
    if record["kind"] == "phase":
        return PhaseEvent.from_dict(fields)
    if fields.get("value") is None:  # a NaN or infinite value, written as null
        fields["value"] = float("nan")
    return ScalarEvent(**fields)


def _event_from_line(line: bytes) -> PhaseEvent | ScalarEvent | None:
    """The event on one line of an events file, or None for a line that holds none."""
    try:
        return event_from_dict(json.loads(line))
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return None


def _is_regular(path: Path) -> bool:
    """Whether ``path`` is a regular file (a symbolic link is not followed)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


@dataclass(frozen=True)
class StoredRun:
    """A run as the store has it (live or finished)."""

    run_id: str
    path: Path

    def config(self) -> dict:
        return read_json(self.path / "config.json")

    def status(self) -> dict:
        return read_json(self.path / "status.json")

    def summary(self) -> dict | None:
        path = self.path / "summary.json"
        return read_json(path) if path.exists() else None

    def entry(self) -> RunEntry:
        """This run as a listing shows it; never raises for a damaged directory."""
        problems: list[str] = []
        status = _read_object(self.path / "status.json", problems)
        config = _read_object(self.path / "config.json", problems)
        recorded = status.get("non_finite")
        named = (
            [name for name in recorded if isinstance(name, str)]
            if isinstance(recorded, list)
            else []
        )
        non_finite = sorted(
            {
                *named,
                *non_finite_fields(status),
                *(f"config.{name}" for name in non_finite_fields(config)),
            }
            - {"non_finite"}
        )
        if not isinstance(status.get("state", "running"), str):
            problems.append("status.json's state is not a string")
        state = DAMAGED if problems else run_state(status)
        return RunEntry(
            run_id=self.run_id,
            path=self.path,
            config=finite_or_none(config),
            status=finite_or_none(status),
            state=state,
            damage="; ".join(problems) or None,
            non_finite=non_finite,
        )

    def events(self) -> list[PhaseEvent | ScalarEvent]:
        """Every complete event line so far (a line still being written is skipped)."""
        return self.read_events(0)[0]

    def read_events(self, offset: int = 0) -> tuple[list[PhaseEvent | ScalarEvent], int]:
        """The events written after byte ``offset`` and the offset to read from next time;
        a line still being written (no newline yet) is left for the next read."""
        path = self.path / "events.jsonl"
        if not _is_regular(path):
            return [], offset
        with path.open("rb") as file:
            file.seek(offset)
            chunk = file.read()
        complete = chunk[: chunk.rfind(b"\n") + 1]
        events = [_event_from_line(line) for line in complete.splitlines()]
        return [event for event in events if event is not None], offset + len(complete)

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


def _read_object(path: Path, problems: list[str]) -> dict:
    """The JSON object in ``path``, or {} with what is wrong with it added to ``problems``."""
    try:
        value = read_json(path)
    except FileNotFoundError:
        problems.append(f"{path.name} is missing")
        return {}
    except OSError as error:
        problems.append(f"{path.name} cannot be read ({error.strerror or error})")
        return {}
    except ValueError as error:
        reason = str(error) if str(error).startswith(path.name) else "truncated or corrupted"
        problems.append(f"{path.name} is not valid JSON ({reason})")
        return {}
    if not isinstance(value, dict):
        problems.append(f"{path.name} holds {type(value).__name__}, not a JSON object")
        return {}
    return value


def _status_text(status: dict) -> dict:
    """The status as written: with the fields whose value is not finite named, since strict
    JSON writes them as null (docs/security/store.md, "Run store")."""
    return {
        **status,
        "non_finite": non_finite_fields({k: v for k, v in status.items() if k != "non_finite"}),
    }


class RunRecorder:
    """Writes one run into the store as it goes: subscribe :meth:`record` to its event log.

    Recording that fails (``OSError``: a full disk, an I/O error) raises
    :class:`StoreError` from the next :meth:`record`, once, so the run fails; :meth:`finish`
    then records it ``failed`` with the reason."""

    def __init__(self, run: StoredRun) -> None:
        self.run = run
        self._events = os.open(
            run.path / "events.jsonl",
            os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
        )
        self._events_size = os.fstat(self._events).st_size
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._closed = False
        self._lock = threading.Lock()
        self._last_step = -1
        self._last_loss_step: int | None = None  # completed steps: the last step with a loss
        self._last_flush = 0.0
        self._status = run.status()
        self._batch_size = int(run.config().get("batch_size") or 1)
        self._loss_times: deque[tuple[float, int]] = deque()  # (time, step) of recent losses
        self._faults = FaultTally()
        self._failure: StoreError | None = None  # why recording failed
        self._failure_raised = False
        self._deferred: threading.Timer | None = None  # a status write put off

    def record(self, event: PhaseEvent | ScalarEvent) -> None:
        line = (strict_dumps(event.to_dict()) + "\n").encode("utf-8")
        with self._lock:
            if self._closed:
                return
            try:
                if self._failure is None:
                    self._record(event, line)
            except OSError as error:
                self._failure = self._store_error("record", error)
            if self._failure is not None and not self._failure_raised:
                self._failure_raised = True
                raise self._failure

    def _record(self, event: PhaseEvent | ScalarEvent, line: bytes) -> None:
        # Lines wait in memory and go out together (a system call per event would cost the
        # training loop's thread on every step), whole, at least once a second.
        self._pending.append(line)
        self._pending_bytes += len(line)
        self._last_step = max(self._last_step, event.step)
        if isinstance(event, ScalarEvent) and event.name == "loss":
            self._last_loss_step = max(self._last_loss_step or 0, event.step)
            self._note_loss(event)
        last_step = self._is_last_step(event)
        if last_step:
            # What the run's panel says too: the devices are done; the summary follows once
            # the run is evaluated and its cluster closed (docs/jupyterlab.md, "Notebook panel").
            self._status["state"] = "finished"
        urgent = self._note_fault(event) or last_step
        now = time.monotonic()
        if self._pending_bytes > PENDING_EVENT_BYTES:
            self._write_pending()
        if urgent or now - self._last_flush > STATUS_EVERY_S:
            self._flush_status(now)
        elif self._deferred is None:
            # A throttled step is still written within STATUS_EVERY_S, even when the next
            # event comes much later (device reports arrive in bursts).
            self._deferred = threading.Timer(
                self._last_flush + STATUS_EVERY_S - now, self._deferred_flush
            )
            self._deferred.daemon = True
            self._deferred.start()

    def _flush_status(self, now: float) -> None:
        self._write_pending()
        self._last_flush = now
        self._status["step"] = self._completed()
        write_json_atomically(self.run.path / "status.json", _status_text(self._status))

    def _deferred_flush(self) -> None:
        """The status write a throttled event put off; a failure is raised by the next
        :meth:`record`, or by :meth:`finish`."""
        with self._lock:
            self._deferred = None
            if self._closed or self._failure is not None:
                return
            try:
                self._flush_status(time.monotonic())
            except OSError as error:
                self._failure = self._store_error("record", error)

    def _is_last_step(self, event: PhaseEvent | ScalarEvent) -> bool:
        """The loss of the run's last step: the status says so at once, not with the next
        event (the next one may come only after the test evaluation)."""
        steps = self._status.get("steps")
        return (
            isinstance(event, ScalarEvent)
            and event.name == "loss"
            and isinstance(steps, int)
            and event.step + 1 >= steps
        )

    def _write_pending(self) -> None:
        lines, self._pending, self._pending_bytes = self._pending, [], 0
        if lines:
            self._append(b"".join(lines))

    def _append(self, line: bytes) -> None:
        """Whole lines at the end of the events file, in one write; a write cut short (a
        full disk) is taken back, so the file always ends on a whole line."""
        written = os.write(self._events, line)
        if written < len(line):
            os.ftruncate(self._events, self._events_size)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self._events_size += written

    def _completed(self, summary: dict | None = None) -> int:
        """Global steps completed: the summary's once there is one, else one past the last
        step with a loss (what the run's handle and its panel count), else past any event's."""
        if summary is not None and isinstance(summary.get("steps"), int):
            return int(summary.get("first_step") or 0) + summary["steps"]
        if self._last_loss_step is not None:
            return self._last_loss_step + 1
        return self._last_step + 1

    def _store_error(self, doing: str, error: OSError) -> StoreError:
        reason = error.strerror or str(error)
        return StoreError(
            f"could not {doing} run {self.run.run_id} in the run store at "
            f"{self.run.path.parent}: {reason}"
        )

    def _note_fault(self, event: PhaseEvent | ScalarEvent) -> bool:
        """Count a fault event into the status; True if status.json should say so now."""
        if not self._faults.add(event):
            return False
        self._status.update(self._faults.status())
        # While a run restores no step comes to trigger the next rewrite: the sidebar would
        # show the failure only once the run is back. Dropped pushes can come every step.
        kind = event.phase if isinstance(event, PhaseEvent) else event.name
        if kind not in RESTART_EVENTS:
            return False
        self._status["state"] = "running"  # the last step, if it was in, runs again
        return True

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
        """Add facts about the live run to status.json (e.g. its cluster's dashboard link).
        Called from a watcher thread: a failure to write is kept for :meth:`record`."""
        with self._lock:
            self._status.update(fields)
            if self._failure is not None:
                return
            try:
                write_json_atomically(self.run.path / "status.json", _status_text(self._status))
            except OSError as error:
                self._failure = self._store_error("record", error)

    def finish(self, state: str, summary: dict | None = None, error: str | None = None) -> None:
        """End the record as ``state`` (``failed``, with the reason, if recording failed).
        Raises :class:`StoreError` when the record could not be ended as it should, or when
        recording failed and no :meth:`record` has said so yet."""
        if state not in STATES:
            raise ValueError(f"state: {state!r} is not one of {', '.join(STATES)}")
        with self._lock:
            if not self._closed:
                self._closed = True
                if self._deferred is not None:
                    self._deferred.cancel()
                    self._deferred = None
                if self._failure is None:
                    try:
                        self._write_pending()
                    except OSError as write_error:
                        self._failure = self._store_error("record", write_error)
                os.close(self._events)
            failure, told = self._failure, self._failure_raised
        if summary is not None and failure is None:
            try:
                write_json_atomically(self.run.path / "summary.json", summary)
            except OSError as write_error:
                failure, told = self._store_error("record the summary of", write_error), False
        if failure is not None:
            state, error = "failed", str(failure)
        status = self._status
        status.update(state=state, error=error, ended=time.time(), step=self._completed(summary))
        if summary is not None and summary.get("samples_per_second") is not None:
            status["samples_per_second"] = summary["samples_per_second"]
        path = self.run.path / "status.json"
        try:
            write_json_atomically(path, _status_text(status))
        except OSError:
            try:
                overwrite_json(path, _status_text(status))  # frees the old file's space first
            except OSError as last:
                raise self._store_error("record the end of", last) from failure
        if failure is not None and not told:
            self._failure_raised = True
            raise failure


class RunStore:
    """The directory of runs. ``RunStore()`` uses :func:`default_store_root`."""

    def __init__(self, root: str | os.PathLike | None = None) -> None:
        self.root = Path(root) if root is not None else default_store_root()

    def _existing_root(self) -> bool:
        """Whether the root exists; raises :class:`StoreError` when it is not this user's
        own directory closed to others' writes (planted runs would be listed, reopened and
        exported). An own directory others may only read is made owner-only."""
        try:
            found = os.lstat(self.root)
        except FileNotFoundError:
            return False
        except OSError as error:
            raise StoreError(
                f"the run store at {self.root} cannot be used: {error.strerror}"
            ) from None
        if (
            not stat.S_ISDIR(found.st_mode)
            or found.st_uid != os.geteuid()
            or found.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        ):
            refused = ForeignPathError(self.root, describe(found), "a private directory")
            raise StoreError(
                f"run store: {refused} (set ${STORE_ENVIRONMENT} to a directory of your own)"
            ) from refused
        if stat.S_IMODE(found.st_mode) & 0o077:
            # Runs hold configurations, data paths and losses; calibrations a cluster's layout.
            os.chmod(self.root, 0o700, follow_symlinks=False)
        return True

    def private_root(self) -> Path:
        """The store's directory, only its owner may enter, made (with its parents) when
        missing; :class:`StoreError` when it is someone else's (see :meth:`_existing_root`)."""
        if not self._existing_root():
            try:
                ensure_private_directory(self.root, parents=True)
            except ForeignPathError as error:  # made by someone else since the check above
                raise StoreError(f"run store: {error}") from error
            except OSError as error:
                raise StoreError(
                    f"the run store at {self.root} cannot be made: {error.strerror or error}"
                ) from error
        return self.root

    def create(self, run_id: str, config: dict, steps: int | None = None) -> RunRecorder:
        """A new run, ``running``; ``steps`` is how many global steps it will take."""
        if not valid_run_id(run_id):
            raise ValueError(f"run id {run_id[:80]!r}: a run id has {RUN_ID_RULE}")
        path = self.private_root() / run_id
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
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            raise StoreError(
                f"run {run_id} already exists in the run store at {self.root}"
            ) from None
        except OSError as error:
            raise StoreError(
                f"could not record run {run_id} in the run store at {self.root}: "
                f"{error.strerror or error}"
            ) from error
        try:
            write_json_atomically(path / "config.json", config)
            write_json_atomically(path / "status.json", _status_text(status))
            return RunRecorder(StoredRun(run_id, path))
        except OSError as error:
            shutil.rmtree(path, ignore_errors=True)  # nothing half-recorded
            raise StoreError(
                f"could not record run {run_id} in the run store at {self.root}: "
                f"{error.strerror or error}"
            ) from error

    def entries(self) -> list[RunEntry]:
        """Every run in the store as a listing shows it, oldest first; a damaged one is
        listed ``damaged``, never left out and never in the way of the others. A run found
        ``lost`` (its process gone) is marked so in its status.json when it is this user's."""
        if not self._existing_root():
            return []
        entries = []
        for path in self.root.iterdir():
            if valid_run_id(path.name) and _is_regular(path / "status.json"):
                entry = StoredRun(path.name, path).entry()
                entries.append(_mark_lost(entry) if entry.state == "lost" else entry)
        return sorted(entries, key=_listing_order)

    def runs(self) -> list[StoredRun]:
        """Every run in the store, oldest first (damaged ones too; see :meth:`entries`)."""
        return [StoredRun(entry.run_id, entry.path) for entry in self.entries()]

    def calibration_path(self, signature: str) -> Path:
        """Where the calibration of the cluster named by ``signature`` is cached (beside the
        runs; not a run, so :meth:`runs` never lists it)."""
        return self.root / "calibrations" / f"{signature}.json"

    def load_calibration(self, signature: str) -> str | None:
        if not self._existing_root():
            return None
        path = self.calibration_path(signature)
        return path.read_text(encoding="utf-8") if path.exists() else None

    def save_calibration(self, signature: str, text: str) -> None:
        """Cache a calibration; :class:`StoreError` when it cannot be written (a full disk)."""
        self.private_root()
        path = self.calibration_path(signature)
        try:
            path.parent.mkdir(mode=0o700, exist_ok=True)
            temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
            try:
                temporary.write_text(text, encoding="utf-8")
                os.replace(temporary, path)
            except OSError:
                with contextlib.suppress(OSError):
                    temporary.unlink()
                raise
        except OSError as error:
            raise StoreError(
                f"could not save a calibration in the run store at {self.root}: "
                f"{error.strerror or error}"
            ) from error

    def open(self, run_id: str) -> StoredRun:
        """The run ``run_id``; ``KeyError`` when there is none (or the id breaks the rule)."""
        if not valid_run_id(run_id):
            raise KeyError(
                f"no run {str(run_id)[:80]!r} in the run store: a run id has {RUN_ID_RULE}"
            )
        path = self.root / run_id
        if not (self._existing_root() and _is_regular(path / "status.json")):
            known = ", ".join(entry.run_id for entry in self.entries()) or "none"
            raise KeyError(f"run {run_id!r} is not in the store at {self.root} (runs: {known})")
        return StoredRun(run_id, path)


def _listing_order(entry: RunEntry) -> tuple[float, str]:
    """When the run started (a damaged one: when its directory last changed), then its id."""
    started = entry.started
    if started is None:
        with contextlib.suppress(OSError):
            started = entry.path.stat().st_mtime
    return (started if started is not None else 0.0, entry.run_id)


def _mark_lost(entry: RunEntry) -> RunEntry:
    """``entry`` with its status.json marked ``lost`` (the reason in ``error``) when this
    user owns it; unchanged on disk otherwise (another user's run, a read-only store)."""
    path = entry.path / "status.json"
    try:
        raw = read_json(path)
        reason = lost_reason(raw) if isinstance(raw, dict) else None
        if reason is None or os.lstat(path).st_uid != os.geteuid():
            return entry
        status = {**raw, "state": "lost", "error": reason, "ended": time.time()}
        write_json_atomically(path, _status_text(status))
    except (OSError, ValueError):
        return entry
    return RunEntry(
        entry.run_id,
        entry.path,
        entry.config,
        finite_or_none(status),
        "lost",
        entry.damage,
        entry.non_finite,
    )
