"""What the JupyterLab sidebar and chart pages ask of the run store, without HTTP.

In: the run store's directories (``config.json``, ``status.json``, ``summary.json``,
``events.jsonl``), written by the kernels that train. Out: plain dicts and strings the
handlers send as they are — run records, clusters, chart columns, a Chrome trace, a CSV.
The only thing it writes is a run's stop request (:meth:`RunsManager.stop`), which the process
training that run polls for.
"""

from __future__ import annotations

import json
import os
import re
import socket
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from workbench.store import RunStore, StoredRun, chrome_trace, scalars_csv

if TYPE_CHECKING:  # Bokeh is imported on the first chart request, not when the server starts
    from workbench.server.run_charts import RunCharts

# What a run id may be: a directory name in the store, never a path out of it.
RUN_ID = r"[A-Za-z0-9._-]+"
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
)
CHARTS_KEPT = 8  # runs whose charts stay cached: the most recently viewed


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        return True
    return True


def run_state(status: dict) -> str:
    """``status["state"]``, except ``lost`` for a run that says it is running but whose
    process on this host has gone (its kernel died or was restarted mid-run). A run on another
    host cannot be checked from here and keeps its stated state."""
    state = status.get("state") or "running"
    pid, hostname = status.get("pid"), status.get("hostname")
    if (
        state == "running"
        and isinstance(pid, int)
        and hostname == socket.gethostname()
        and not _process_alive(pid)
    ):
        return "lost"
    return state


def run_record(run: StoredRun, config: dict, status: dict) -> dict[str, Any]:
    """One row of the run list; every live field may be missing (an older or starting run)."""
    record: dict[str, Any] = {
        "id": run.run_id,
        "strategy": config.get("strategy"),
        "devices": config.get("devices"),
        # status has the total once the run is prepared (epochs turned into steps)
        "steps": status.get("steps") if status.get("steps") is not None else config.get("steps"),
        "state": run_state(status),
        "dashboard_link": status.get("dashboard_link"),
    }
    record.update({name: status.get(name) for name in RECORD_STATUS_FIELDS})
    return record


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
        self._charts: OrderedDict[str, RunCharts] = OrderedDict()
        self._charts_lock = threading.Lock()

    # Reading runs ------------------------------------------------------------------------

    def _open(self, run_id: str) -> StoredRun:
        if not re.fullmatch(RUN_ID, run_id) or run_id in (".", ".."):
            raise KeyError(f"no run {run_id!r} in the run store")
        try:
            return self.store.open(run_id)
        except KeyError:
            raise KeyError(f"no run {run_id!r} in the run store") from None

    def _record(self, run: StoredRun) -> dict[str, Any]:
        return run_record(run, run.config(), run.status())

    def runs(self) -> list[dict[str, Any]]:
        """Every run, newest first (the store lists them oldest first)."""
        records = []
        for run in reversed(self.store.runs()):
            try:
                records.append(self._record(run))
            except (OSError, ValueError):  # a run directory half created or damaged: skip it
                continue
        return records

    def run(self, run_id: str) -> dict[str, Any]:
        """The run's record with its ``config`` and ``summary`` (None until it has finished)."""
        run = self._open(run_id)
        config = run.config()
        return {**run_record(run, config, run.status()), "config": config, "summary": run.summary()}

    def clusters(self) -> list[dict[str, Any]]:
        """The clusters live runs train on: ``address``, ``dashboard_link`` and ``runs``."""
        clusters: dict[tuple, dict[str, Any]] = {}
        for run in self.store.runs():
            try:
                status = run.status()
            except (OSError, ValueError):
                continue
            address = status.get("scheduler_address")
            if run_state(status) != "running" or address is None:
                continue  # a one-device run has no cluster
            key = (address, status.get("dashboard_link"))
            cluster = clusters.setdefault(
                key, {"address": address, "dashboard_link": key[1], "runs": []}
            )
            cluster["runs"].append(run.run_id)
        return list(clusters.values())

    # Acting on a run ---------------------------------------------------------------------

    def stop(self, run_id: str) -> dict[str, Any]:
        """Ask a running run to stop after the step in flight; ``ValueError`` naming its state
        if it is not running."""
        run = self._open(run_id)
        record = self._record(run)
        if record["state"] != "running":
            raise ValueError(f"run {run_id!r} is {record['state']}; only a running run can stop")
        run.request_stop()
        return {**record, "state": "stopping"}

    # Charts and exports ------------------------------------------------------------------

    def chart_data(self, run_id: str, page: str) -> dict[str, Any]:
        """The run's state and the columns of the sources chart page ``page`` draws, with what
        the run wrote since the last call added."""
        from workbench.server.run_charts import page_figures

        page_figures(page)  # unknown page: KeyError before any work
        run = self._open(run_id)
        charts = self._run_charts(run)
        charts.update()
        return {"state": self._record(run)["state"], **charts.page_data(page)}

    def _run_charts(self, run: StoredRun) -> RunCharts:
        from workbench.server.run_charts import RunCharts

        with self._charts_lock:
            charts = self._charts.get(run.run_id)
            if charts is None:
                batch_size = int(run.config().get("batch_size") or 1)
                charts = self._charts[run.run_id] = RunCharts(run, batch_size)
            self._charts.move_to_end(run.run_id)
            while len(self._charts) > CHARTS_KEPT:
                self._charts.popitem(last=False)
            return charts

    def trace(self, run_id: str) -> str:
        """The run's events as Chrome-trace JSON (chrome://tracing, Perfetto)."""
        return json.dumps(chrome_trace(self._open(run_id).events()))

    def scalars_csv(self, run_id: str) -> str:
        """The run's per-step scalars as CSV."""
        return scalars_csv(self._open(run_id).events())
