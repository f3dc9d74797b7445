"""What the JupyterLab sidebar and chart pages ask of the run store, without HTTP.

In: the run store's directories (``config.json``, ``status.json``, ``summary.json``,
``events.jsonl``), written by the kernels that train. Out: plain dicts and strings the
handlers send as they are — run records, clusters, chart columns, a Chrome trace, a CSV.
The only thing it writes is a run's stop request (:meth:`RunsManager.stop`), which the process
training that run polls for.
"""

from __future__ import annotations

import os
import socket
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from workbench.safe_io import strict_dumps
from workbench.safe_io.private_paths import owner_name
from workbench.server.listing_cache import ListingCache
from workbench.store import (
    RunEntry,
    RunStore,
    StoredRun,
    chrome_trace,
    process_uid,
    run_state,
    scalars_csv,
    valid_run_id,
)

if TYPE_CHECKING:  # Bokeh is imported on the first chart request, not when the server starts
    from workbench.server.run_charts import RunCharts

__all__ = ["RunsManager", "run_record", "run_state"]

RECORD_STATUS_FIELDS = (
    "step",
    "loss",
    "samples_per_second",
    "error",
    "started",
    "ended",
    # Fault counts (workbench/store/run_store.py): None for a run recorded before them.
    "restarts",
    "failures",
    "dropped_updates",
    "recovery_seconds",
    # Why the run failed or restarted, one line each (the sidebar's problem line).
    "failure_reasons",
)
CHARTS_KEPT = 8  # runs whose charts stay cached: the most recently viewed


def run_record(entry: RunEntry) -> dict[str, Any]:
    """One row of the run list; every live field may be missing (an older or starting run).
    ``damage`` says why a ``damaged`` run could not be read, ``non_finite`` which fields held
    NaN or an infinity (sent as null)."""
    config, status = entry.config, entry.status
    record: dict[str, Any] = {
        "id": entry.run_id,
        "strategy": config.get("strategy"),
        "devices": config.get("devices"),
        # status has the total once the run is prepared (epochs turned into steps)
        "steps": status.get("steps") if status.get("steps") is not None else config.get("steps"),
        "state": entry.state,
        "dashboard_link": status.get("dashboard_link"),
    }
    record.update({name: status.get(name) for name in RECORD_STATUS_FIELDS})
    record["damage"] = entry.damage
    record["non_finite"] = entry.non_finite
    return record


def _batch_size(config: dict) -> int:
    value = config.get("batch_size")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1


class RunsManager:
    """The run store as the server extension sees it. ``store`` defaults to ``RunStore()``
    (``$DTRAIN_RUN_STORE`` or the user's data directory).

    Examples
    --------
    >>> import tempfile
    >>> manager = RunsManager(RunStore(tempfile.mkdtemp()))
    >>> manager.runs(), manager.clusters()
    ([], [])
    """

    def __init__(self, store: RunStore | None = None) -> None:
        self.store = store if store is not None else RunStore()
        self._listing = ListingCache(self.store)
        self._charts: OrderedDict[str, RunCharts] = OrderedDict()
        self._charts_lock = threading.Lock()

    # Reading runs ------------------------------------------------------------------------

    def _open(self, run_id: str) -> StoredRun:
        if not valid_run_id(run_id):  # "..", a path, an over-long name: no such run
            raise KeyError(f"no run {run_id[:80]!r} in the run store")
        try:
            return self.store.open(run_id)
        except KeyError:
            raise KeyError(f"no run {run_id!r} in the run store") from None

    def runs(self) -> list[dict[str, Any]]:
        """Every run, newest first (the store lists them oldest first); a damaged one is
        listed with its reason, never skipped."""
        return [run_record(entry) for entry in reversed(self._listing.entries())]

    def run(self, run_id: str) -> dict[str, Any]:
        """The run's record with its ``config`` and ``summary`` (None until it has finished,
        or when it cannot be read)."""
        entry = self._open(run_id).entry()
        return {**run_record(entry), "config": entry.config, "summary": _summary(entry)}

    def clusters(self) -> list[dict[str, Any]]:
        """The clusters live runs train on: ``address``, ``dashboard_link`` and ``runs``."""
        clusters: dict[tuple, dict[str, Any]] = {}
        for entry in self._listing.entries():
            address = entry.status.get("scheduler_address")
            if entry.state != "running" or not isinstance(address, str):
                continue  # a one-device run has no cluster
            link = entry.status.get("dashboard_link")
            key = (address, link if isinstance(link, str) else None)
            cluster = clusters.setdefault(
                key, {"address": address, "dashboard_link": key[1], "runs": []}
            )
            cluster["runs"].append(entry.run_id)
        return list(clusters.values())

    # Acting on a run ---------------------------------------------------------------------

    def stop(self, run_id: str) -> dict[str, Any]:
        """Ask a running run to stop after the step in flight; ``ValueError`` naming its state
        if it is not running, ``PermissionError`` if it is not this server's user's to stop."""
        run = self._open(run_id)
        entry = run.entry()
        if entry.state != "running":
            raise ValueError(f"run {run_id!r} is {entry.state}; only a running run can stop")
        _check_may_stop(entry)
        run.request_stop()
        return {**run_record(entry), "state": "stopping"}

    # Charts and exports ------------------------------------------------------------------

    def chart_data(self, run_id: str, page: str) -> dict[str, Any]:
        """The run's state and the columns of the sources chart page ``page`` draws, with what
        the run wrote since the last call added."""
        from workbench.server.run_charts import page_figures

        page_figures(page)  # unknown page: KeyError before any work
        run = self._open(run_id)
        charts = self._run_charts(run)
        charts.update()
        entry = run.entry()
        return {"state": entry.state, "recording": entry.recording, **charts.page_data(page)}

    def _run_charts(self, run: StoredRun) -> RunCharts:
        from workbench.server.run_charts import RunCharts

        with self._charts_lock:
            charts = self._charts.get(run.run_id)
            if charts is None:
                charts = RunCharts(run, _batch_size(run.entry().config))
                self._charts[run.run_id] = charts
            self._charts.move_to_end(run.run_id)
            while len(self._charts) > CHARTS_KEPT:
                self._charts.popitem(last=False)
            return charts

    def trace(self, run_id: str) -> str:
        """The run's events as Chrome-trace JSON (chrome://tracing, Perfetto)."""
        return strict_dumps(chrome_trace(self._open(run_id).events()))

    def scalars_csv(self, run_id: str) -> str:
        """The run's per-step scalars as CSV."""
        return scalars_csv(self._open(run_id).events())


def _summary(entry: RunEntry) -> dict | None:
    run = StoredRun(entry.run_id, entry.path)
    try:
        summary = run.summary()
    except (OSError, ValueError):  # damaged: the record's other fields still show
        return None
    return summary if isinstance(summary, dict) else None


def _check_may_stop(entry: RunEntry) -> None:
    """``PermissionError`` unless this server's user owns the run and the process training
    it: a stop request is a file that only the run's owner should be able to leave."""
    me = os.geteuid()
    try:
        owner = (entry.path / "status.json").lstat().st_uid
    except OSError as error:
        raise PermissionError(
            f"run {entry.run_id!r} cannot be stopped from here: {error}"
        ) from None
    if owner != me:
        raise PermissionError(
            f"run {entry.run_id!r} belongs to {owner_name(owner)}; this server runs as "
            f"{owner_name(me)} and cannot stop it"
        )
    pid = entry.status.get("pid")
    if isinstance(pid, int) and entry.status.get("hostname") == socket.gethostname():
        trainer = process_uid(pid)
        if trainer is not None and trainer != me:
            raise PermissionError(
                f"run {entry.run_id!r} is trained by process {pid} of {owner_name(trainer)}; "
                f"this server runs as {owner_name(me)} and cannot stop it"
            )
