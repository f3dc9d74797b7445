"""Fault tolerance on real local clusters: worker processes are killed mid-run (SIGKILL) and
the run must recover, shrink, or drop the worker, as its strategy allows."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time
from dataclasses import replace

import numpy as np
import pytest
from distributed import Client, LocalCluster

from tests.parallel.worker_processes import dask_worker_processes
from workbench.config import RunConfig
from workbench.events import EventLog
from workbench.launch.runner import run_training
from workbench.parallel.dispatch import DeviceFailure

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_leftover_processes")]

SMALL = dict(dataset="digits", hidden=(32, 16), dtype="float64", lr_decay="none", seed=0)
# Runs judged by accuracy: the default MLP (512, 512) in float32.
LEARNING = dict(dataset="digits", dtype="float32", seed=0)


class Chaos:
    """Calls ``act()`` once the run's logged loss reaches each step of ``at``."""

    def __init__(self, log: EventLog, at: tuple[int, ...], act) -> None:
        self.log, self.at, self.act = log, at, act
        self.done = threading.Event()
        self.acted: list[int] = []
        self.thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        for step in self.at:
            deadline = time.monotonic() + 120  # bounded: a stuck run fails on its own
            while not self.done.is_set() and time.monotonic() < deadline:
                losses = self.log.scalars("loss")
                if losses and losses[-1].step >= step:
                    break
                time.sleep(0.02)
            if self.done.is_set():
                return
            self.act()
            self.acted.append(step)
            time.sleep(0.5)

    def __enter__(self) -> Chaos:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        self.thread.join(timeout=10)


def kill_random_worker() -> None:
    random.choice(dask_worker_processes()).send_signal(signal.SIGKILL)


def train(config: RunConfig, at=(), act=kill_random_worker, job_hook=None, progress=None):
    log = EventLog()
    with Chaos(log, at, act) as chaos:
        result = run_training(
            config, log=log, progress=progress or (lambda _: None), job_hook=job_hook
        )
    assert chaos.acted == list(at), "the run ended before every fault was injected"
    return result


CHAOS_RUNS = {
    "mirrored": dict(strategy="mirrored", devices=2),
    "pipeline": dict(strategy="pipeline", devices=2, stages=2, microbatches=4),
    "parameter-server": dict(strategy="parameter-server", devices=2, ps=1, mode="sync"),
}


@pytest.mark.parametrize("name", list(CHAOS_RUNS))
def test_two_killed_workers_leave_the_result_bit_identical(name):
    config = RunConfig(**CHAOS_RUNS[name], **SMALL, steps=200, batch_size=32, checkpoint_every=20)
    clean = train(config)
    chaotic = train(config, at=(50, 130))
    assert chaotic.summary["restarts"] == 2
    assert clean.summary["restarts"] == 0
    assert len(chaotic.summary["recovery_seconds"]) == 2
    for name_, value in clean.parameters.items():
        assert np.array_equal(value, chaotic.parameters[name_]), name_
    failures = [e for e in chaotic.log.phases() if e.phase == "failure"]
    recoveries = [e for e in chaotic.log.phases() if e.phase == "recovery"]
    assert len(failures) == 2 and recoveries
    assert [e.value for e in chaotic.log.scalars("restarts")] == [1, 2]


def test_past_max_restarts_the_run_fails_naming_the_device_and_step():
    config = RunConfig(
        strategy="mirrored", devices=2, **SMALL, steps=400, batch_size=32, max_restarts=0
    )
    with pytest.raises(DeviceFailure, match=r"/job:worker/task:\d.* at step \d+"):
        train(config, at=(40,))


def _local_cluster(workers: int) -> LocalCluster:
    return LocalCluster(
        n_workers=workers,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=":0",
        memory_limit=0,
    )


def _elastic(cluster: LocalCluster, steps: dict) -> RunConfig:
    return RunConfig(
        strategy="mirrored",
        devices=3,
        elastic=True,
        cluster=cluster.scheduler_address,
        checkpoint_every=20,
        replacement_timeout=2,
        **SMALL,
        **steps,
    )


def _assert_equal_to_one_device(result, steps: dict) -> None:
    one = run_training(RunConfig(**SMALL, **steps), progress=lambda _: None)
    for name, value in one.parameters.items():
        scale = np.max(np.abs(value))
        assert np.max(np.abs(result.parameters[name] - value)) <= 1e-10 * scale, name


def test_elastic_mirrored_finishes_on_two_devices_with_the_one_device_result():
    steps = dict(steps=120, batch_size=48)
    with _local_cluster(3) as cluster:
        # A worker whose nanny closes too never comes back: no replacement is offered.
        elastic = train(_elastic(cluster, steps), at=(40,), act=lambda: cluster.scale(2))
    assert elastic.summary["devices_at_end"] == 2
    assert elastic.summary["restarts"] == 1
    _assert_equal_to_one_device(elastic, steps)


def test_elastic_mirrored_grows_again_when_a_worker_joins():
    steps = dict(steps=300, batch_size=48)
    changes = iter([2, 3])
    # Slow steps (task:0 computes 20x as long): the joining worker starts before the run ends.
    config = _elastic(cluster := _local_cluster(3), steps).replace(
        simulate_straggler=(("task:0", 20.0),)
    )
    with cluster:
        elastic = train(config, at=(40, 90), act=lambda: cluster.scale(next(changes)))
    assert "devices_at_end" not in elastic.summary  # all three again
    third = "/job:worker/task:2/device:CPU:0"
    steps_on_third = {e.step for e in elastic.log.phases(third) if e.phase == "compute"}
    assert max(steps_on_third) == 299 and not steps_on_third & set(range(60, 100))
    _assert_equal_to_one_device(elastic, steps)


def test_a_slow_async_worker_applies_fewer_updates_and_staleness_shows():
    config = RunConfig(
        strategy="parameter-server",
        devices=2,
        mode="async",
        steps=200,
        # Big slices: compute, which the straggler slows, outweighs pulls and pushes.
        batch_size=1024,
        simulate_straggler=("task:1=3",),
        **LEARNING,
    )
    result = run_training(config, progress=lambda _: None)
    updates = [entry.get("updates") for entry in result.summary["per_device"]]
    fast, slow = updates[0], updates[1]
    assert fast >= 2 * slow > 0, updates
    assert result.summary["staleness"]["max"] > 0


class _ClusterSeen:
    """One of the job's observers: told the run's cluster as it comes up."""

    session = None

    def scheduler_options(self) -> dict:
        return {}

    @contextlib.contextmanager
    def watch(self, session, *_):
        self.session = session
        yield


def _kill_async_worker_zero(seen: _ClusterSeen) -> None:
    run_client = seen.session.client
    address, security = run_client.scheduler.address, run_client.security
    with Client(address, timeout=10, security=security) as client:
        workers = client.scheduler_info(n_workers=-1)["workers"]
        address = next(a for a, w in workers.items() if str(w.get("name")) == "0")
        pid = client.run(os.getpid, workers=[address])[address]
    os.kill(pid, signal.SIGKILL)


def test_a_killed_async_worker_is_dropped_and_training_goes_on():
    seen = _ClusterSeen()
    config = RunConfig(
        strategy="parameter-server",
        devices=2,
        mode="async",
        steps=300,
        batch_size=32,
        **LEARNING,
    )
    said: list[str] = []
    result = train(
        config,
        at=(60,),
        act=lambda: _kill_async_worker_zero(seen),
        job_hook=lambda job: replace(job, observers=[*job.observers, seen]),
        progress=said.append,
    )
    assert result.summary["restarts"] == 0, said
    assert result.summary["test_accuracy"] >= 0.95
    assert [e.device for e in result.log.phases() if e.phase == "failure"] == [
        "/job:worker/task:0/device:CPU:0"
    ]


def test_backup_workers_drop_the_late_gradients_and_still_learn():
    config = RunConfig(
        strategy="parameter-server",
        devices=3,
        mode="sync",
        backup_workers=1,
        steps=300,
        batch_size=48,
        simulate_straggler=("task:1=3",),
        **LEARNING,
    )
    result = run_training(config, progress=lambda _: None)
    assert result.summary["test_accuracy"] >= 0.95
    assert result.summary["dropped_gradients"] > 0
    dropped = [e for e in result.log.phases() if e.phase == "dropped"]
    assert len(dropped) == result.summary["dropped_gradients"]
    assert result.log.scalars("dropped_updates")
