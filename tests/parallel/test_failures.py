"""A device that dies mid-run ends the run quickly with an error naming it and the step."""

import os
import signal
import threading
import time

import pytest

from tests.parallel.worker_processes import dask_worker_processes
from workbench.config import RunConfig
from workbench.events import EventLog
from workbench.launch.runner import run_training
from workbench.parallel.dispatch import DeviceFailure

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("strategy", ["mirrored", "parameter-server"])
def test_killing_a_worker_names_the_device_and_step(strategy, no_leftover_processes):
    log = EventLog()
    killed = threading.Event()

    def kill_after_first_steps(event):
        if getattr(event, "name", None) == "loss" and event.step >= 3 and not killed.is_set():
            killed.set()
            victims = dask_worker_processes()
            assert victims, "no worker process found"
            os.kill(victims[-1].pid, signal.SIGKILL)

    log.subscribe(kill_after_first_steps)
    # No restarts allowed: the run fails with the error it had before recovery existed.
    config = RunConfig(
        strategy=strategy, devices=2, steps=100000, stall_timeout=5, hidden=(16,), max_restarts=0
    )
    started = time.monotonic()
    with pytest.raises(DeviceFailure) as failure:
        run_training(config, log=log, progress=lambda _: None)
    assert killed.is_set()
    message = str(failure.value)
    assert "died during a step at step" in message and "/job:" in message

    assert time.monotonic() - started < 60


def _result_held_by_worker() -> bytes:
    return b"x" * 1024


def test_a_result_lost_with_its_worker_is_a_failure_not_a_wait(no_leftover_processes):
    from workbench.parallel.dispatch import submit_each, wait_all
    from workbench.runtime.cluster import start_cluster

    with start_cluster(2) as session:
        (future,) = submit_each(session, "test", "step", 0, _result_held_by_worker, [()], ranks=[1])
        deadline = time.monotonic() + 30
        while future.status != "finished" and time.monotonic() < deadline:
            time.sleep(0.01)
        pid = session.client.run(os.getpid, workers=[session.addresses[1]])
        os.kill(pid[session.addresses[1]], signal.SIGKILL)
        started = time.monotonic()
        with pytest.raises(DeviceFailure, match="task:1"):
            # Finished before the kill: only the gather can notice that the result is gone.
            wait_all(session, [future], "a step", 0, deadline=180, ranks=[1])
        assert time.monotonic() - started < 20
