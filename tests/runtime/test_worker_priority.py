"""The workers of a cluster the workbench starts compute at a lower priority than the process
that started them, so a run that keeps every core busy leaves the notebook, the Jupyter server
and the browser a core when they need one (docs/jupyterlab.md, "Notebook panel")."""

from __future__ import annotations

import os

import pytest
from distributed import Client

from workbench.runtime.local_cluster import local_cpu_cluster
from workbench.runtime.worker_priority import LOCAL_WORKER_NICENESS

pytestmark = pytest.mark.integration


def _niceness() -> int:
    return os.nice(0)


def test_a_local_workers_tasks_run_at_a_lower_priority():
    cluster = local_cpu_cluster(1, "tcp", {}, None)
    try:
        with Client(cluster, set_as_default=False) as client:
            in_task = client.submit(_niceness, pure=False).result(timeout=60)
            on_loop = next(iter(client.run(_niceness).values()))
    finally:
        cluster.close()
    expected = min(19, os.nice(0) + LOCAL_WORKER_NICENESS)
    assert in_task == expected and on_loop == expected
