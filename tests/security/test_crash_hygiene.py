"""A client killed with ``kill -9`` mid-run: within seconds nothing of its run is left on
/dev/shm or in its scratch directory (the janitor sweeps once the orphaned workers exit), and
the store lists the run as lost with the reason."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from workbench.runtime.scratch import scratch_base
from workbench.store import RunStore

pytestmark = pytest.mark.integration

# The janitor sweeps for 15 s after the client died; the workers exit within a second or two.
GONE_WITHIN_SECONDS = 15.0


def _ours_on_shm() -> set[str]:
    prefix = f"dtrain-{os.geteuid()}-"
    return {name for name in os.listdir("/dev/shm") if name.startswith(prefix)}


def _scratch() -> set[str]:
    return {name for name in os.listdir(scratch_base()) if name.startswith("dtrain-scratch-")}


def _wait_for(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_a_killed_client_leaves_nothing_and_its_run_is_lost(store_root):
    shm_before, scratch_before = _ours_on_shm(), _scratch()
    argv = [
        "run",
        "--strategy",
        "mirrored",
        "--devices",
        "2",
        "--hidden",
        "16",
        "--steps",
        "100000",
    ]
    client = subprocess.Popen(
        [sys.executable, "-m", "workbench.cli.main", *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "DTRAIN_RUN_STORE": str(store_root)},
    )
    try:
        assert _wait_for(lambda: _ours_on_shm() - shm_before, 120), "the run never started"
        client.send_signal(signal.SIGKILL)
        client.wait(10)
        assert _wait_for(lambda: not (_ours_on_shm() - shm_before), GONE_WITHIN_SECONDS), (
            _ours_on_shm() - shm_before
        )
        assert _wait_for(lambda: not (_scratch() - scratch_before), GONE_WITHIN_SECONDS)
    finally:
        if client.poll() is None:
            client.kill()
    (run,) = RunStore(store_root).entries()
    assert run.state == "lost"
    assert str(client.pid) in run.status["error"]
