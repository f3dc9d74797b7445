"""Cluster tests start real local Dask clusters; this checks each one leaves no process behind."""

import os
import time

import psutil
import pytest

from workbench.runtime.shared_memory import SHM_DIRECTORY

# Python's multiprocessing helpers live as long as the test process itself; they are not part
# of any cluster.
_PROCESS_HELPERS = ("resource_tracker", "forkserver")


def _is_cluster_process(process: psutil.Process) -> bool:
    try:
        command = " ".join(process.cmdline())
        return process.status() != psutil.STATUS_ZOMBIE and not any(
            helper in command for helper in _PROCESS_HELPERS
        )
    except psutil.NoSuchProcess:
        return False


@pytest.fixture
def no_leftover_processes():
    me = psutil.Process()
    before = {child.pid for child in me.children(recursive=True)}
    yield
    deadline = time.monotonic() + 15
    while True:
        extra = [
            c for c in me.children(recursive=True) if c.pid not in before and _is_cluster_process(c)
        ]
        if not extra or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert not extra, f"processes left running: {[(p.pid, p.name()) for p in extra]}"
    segments = [name for name in os.listdir(SHM_DIRECTORY) if name.startswith("dtrain-")]
    assert not segments, f"shared-memory segments left behind: {segments}"
