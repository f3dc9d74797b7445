"""NCCL as CuPy 13/14 and NCCL itself behave, on the CPU double (``pytest -m gpu_path``): the
unique id in the installed CuPy's type, NCCL missing on the workers, a reduction that is over
when the all-reduce returns, and peers that never join or hang mid-run, which end the step
within the stall timeout with the device named, and which recovery gets past as on CPUs."""

from __future__ import annotations

import time

import numpy as np
import pytest

from tests.gpu_double import fake_cupy
from tests.parallel.test_equivalence import BASE, assert_same_parameters
from workbench.cli.main import main
from workbench.config import RunConfig
from workbench.launch.runner import run_training
from workbench.parallel.dispatch import DeviceFailure

pytestmark = [
    pytest.mark.integration,
    pytest.mark.gpu_path,
    pytest.mark.usefixtures("no_leftover_processes"),
]
QUIET = {"progress": lambda _: None}
SMALL = {**BASE, "steps": 4}


def nccl_run(progress=lambda _: None, **flags):
    config = RunConfig(strategy="mirrored", devices=2, device_type="gpu", dtype="float64")
    return run_training(
        config.replace(**{**SMALL, "allreduce": "nccl", **flags}), progress=progress
    )


def oracle():
    return run_training(RunConfig(device_type="gpu", dtype="float64", **SMALL), **QUIET)


@pytest.mark.parametrize("cupy_major", ["14", "13"])
def test_nccl_joins_with_the_unique_id_the_installed_cupy_makes(cpu_double_gpus, cupy_major):
    # CuPy 14: 128 bytes, and a tuple is refused; CuPy 13: a tuple of signed chars.
    cpu_double_gpus.setenv("DTRAIN_FAKE_CUPY_MAJOR", cupy_major)
    result = nccl_run()
    assert result.summary["allreduce"] == "nccl"
    assert_same_parameters(result, oracle(), 1e-10)


def test_without_nccl_auto_takes_the_ring_and_nccl_is_refused_naming_the_flag(
    cpu_double_gpus, capsys
):
    cpu_double_gpus.setenv("DTRAIN_FAKE_NCCL", "0")  # cupy.cuda.nccl.available is False
    result = nccl_run(allreduce="auto")
    assert result.summary["allreduce"] == "ring"
    assert_same_parameters(result, oracle(), 1e-10)
    flags = ["--strategy", "mirrored", "--devices", "2", "--device-type", "gpu"]
    code = main(["run", *flags, "--allreduce", "nccl", "--steps", "2", "--no-calibrate"])
    assert code == 2
    err = capsys.readouterr().err
    assert "--allreduce" in err and "NCCL did not load on" in err and "ring" in err


def reduce_once(run_id, rank, addresses, names, stall_timeout=30.0):
    """On a worker: one NCCL all-reduce of [rank + 1] * 4; what the buffer holds once the
    all-reduce returns, and whether the device still had the reduction queued then (or the
    error it raised)."""
    from workbench.parallel.collectives.nccl import NcclAllReduce
    from workbench.runtime.device_arrays import DeviceArrays
    from workbench.runtime.peer_transport import PeerTransport
    from workbench.runtime.worker_service import device_service

    device = DeviceArrays.for_kind("gpu", names[rank])
    transport = PeerTransport(run_id, rank, addresses, names, stall_timeout, device)
    nccl = NcclAllReduce(transport, device.runtime, stall_timeout)
    try:
        buffer = device.xp.full(4, float(rank + 1))
        started = time.perf_counter()
        try:
            nccl(buffer)
        except Exception as error:
            return {"seconds": time.perf_counter() - started, "error": str(error)}
        seconds = time.perf_counter() - started
        still_queued = not fake_cupy.queue.marker()()
        return {"seconds": seconds, "still_queued": still_queued, "sum": buffer.get().tolist()}
    finally:
        nccl.close()
        device_service().forget(run_id)


def test_an_nccl_all_reduce_returns_once_the_reduction_has_finished(cpu_double_gpus):
    # The phase's end is the reduction's: its time is booked to the all-reduce, not to
    # whatever the device does next.
    from workbench.parallel.dispatch import submit_each, wait_all
    from workbench.runtime.cluster import start_cluster

    cpu_double_gpus.setenv("DTRAIN_FAKE_NCCL_SECONDS", "0.3")
    with start_cluster(2, "gpu") as session:
        arguments = [
            (session.run_id, rank, session.addresses, session.device_names) for rank in (0, 1)
        ]
        futures = submit_each(session, "test", "nccl", 0, reduce_once, arguments)
        results = wait_all(session, futures, "an all-reduce", 0, deadline=120)
    for result in results:
        assert result["still_queued"] is False
        assert result["seconds"] >= 0.3
        assert result["sum"] == [3.0] * 4


def test_a_peer_that_hangs_in_an_all_reduce_fails_the_other_within_the_stall_timeout(
    cpu_double_gpus,
):
    from workbench.parallel.dispatch import submit_each
    from workbench.runtime.cluster import start_cluster

    cpu_double_gpus.setenv("DTRAIN_FAKE_NCCL_STALL", "allreduce:1:0")
    with start_cluster(2, "gpu") as session:
        arguments = [
            (session.run_id, rank, session.addresses, session.device_names, 2.0) for rank in (0, 1)
        ]
        futures = submit_each(session, "test", "nccl", 0, reduce_once, arguments)
        result = futures[0].result(timeout=60)  # rank 1 never returns: it hangs on its GPU
    assert result["seconds"] < 10
    assert result["error"].startswith("step None: /job:worker/task:0/device:GPU:0's NCCL")
    assert "did not finish within 2s: one of /job:worker/task:1/device:GPU:0" in result["error"]


def test_a_peer_that_never_joins_nccl_fails_the_step_within_the_stall_timeout(
    cpu_double_gpus,
):
    cpu_double_gpus.setenv("DTRAIN_FAKE_NCCL_STALL", "join:1")
    started = time.monotonic()
    with pytest.raises(DeviceFailure) as failure:
        nccl_run(stall_timeout=3, max_restarts=0, steps=40)
    assert time.monotonic() - started < 60
    message = str(failure.value)
    assert "NCCL's communicator" in message and "/job:worker/task:" in message


def test_recovery_gets_past_a_peer_that_hangs_in_an_nccl_all_reduce(cpu_double_gpus, tmp_path):
    clean = nccl_run(steps=40, checkpoint_every=10)
    cpu_double_gpus.setenv("DTRAIN_FAKE_NCCL_STALL", "allreduce:1:25")
    cpu_double_gpus.setenv("DTRAIN_FAKE_NCCL_STALL_ONCE", str(tmp_path / "stalled"))
    started, told = time.monotonic(), []
    recovered = nccl_run(told.append, steps=40, checkpoint_every=10, stall_timeout=3)
    assert (tmp_path / "stalled").exists(), "no rank hung: the test tested nothing"
    assert recovered.summary["restarts"] == 1
    assert time.monotonic() - started < 120
    assert [e for e in recovered.log.phases() if e.phase == "failure"]
    # The client's own watchdog or the device's NCCL deadline, whichever fires first.
    restoring = [line for line in told if "restoring every device" in line]
    assert len(restoring) == 1 and "/job:worker/task:" in restoring[0], told
    for name, value in clean.parameters.items():
        assert np.array_equal(value, recovered.parameters[name]), name
