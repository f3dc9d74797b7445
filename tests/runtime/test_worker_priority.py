"""The workers of a cluster the workbench starts compute at a lower priority than the process
that started them, so a run that keeps every core busy leaves the notebook, the Jupyter server
and the browser a core when they need one (docs/jupyterlab.md, "Notebook panel"); and nothing
wakes their event loops, taking the interpreter lock from the device's thread, more often than
twice a second, the system monitor once in 5 s (docs/architecture/dask-costs.md, "What Dask
costs")."""

from __future__ import annotations

import os

import dask
import pytest
from distributed import Client

from workbench.runtime.local_cluster import local_cpu_cluster
from workbench.runtime.worker_priority import LOCAL_WORKER_NICENESS

pytestmark = pytest.mark.integration


def _niceness() -> int:
    return os.nice(0)


def _timers(dask_worker) -> dict[str, float]:
    """The worker's periodic callbacks, by name: their intervals in milliseconds."""
    return {name: timer.callback_time for name, timer in dask_worker.periodic_callbacks.items()}


def test_a_local_workers_tasks_run_at_a_lower_priority_unsampled():
    cluster = local_cpu_cluster(1, "tcp", {}, None)
    try:
        with Client(cluster, set_as_default=False) as client:
            in_task = client.submit(_niceness, pure=False).result(timeout=60)
            on_loop = next(iter(client.run(_niceness).values()))
            timers = next(iter(client.run(_timers).values()))
    finally:
        cluster.close()
    expected = min(19, os.nice(0) + LOCAL_WORKER_NICENESS)
    assert in_task == expected and on_loop == expected
    # No profiler sampling the task's thread every 10 ms, a health tick a second instead of
    # every 20 ms: nothing wakes the worker's event loop more often than twice a second.
    assert "profile" not in timers and timers["tick"] == 1000, timers
    assert timers["monitor"] == 5000, timers  # the system monitor: once in 5 s
    # The heartbeat (twice a second, as the scheduler asks) is the most frequent timer left.
    assert min(timers.values()) >= 500, timers
    assert dask.config.get("distributed.worker.profile.enabled")  # this process's is unchanged
