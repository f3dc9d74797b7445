"""Every strategy's GPU code path, run on CPUs through the strict CuPy double (``pytest -m
gpu_path``): variables, slots, data shards, activations and gradients stay device arrays (a
kernel handed a NumPy array on a GPU device fails the run), the host sees tensors only when
they are staged, snapshotted or gathered, and every synchronous strategy still ends where the
one-device oracle ends (float64, 1e-10 relative)."""

import numpy as np
import pytest

from tests.parallel.test_equivalence import BASE, CONFIGURATIONS, assert_same_parameters
from workbench.config import RunConfig
from workbench.launch.runner import run_training

pytestmark = [pytest.mark.integration, pytest.mark.gpu_path]

QUIET = {"progress": lambda _: None}
GPU_CONFIGURATIONS = [
    *CONFIGURATIONS,
    {"strategy": "mirrored", "allreduce": "nccl"},
    {"strategy": "mirrored", "allreduce": "ring", "compression": "float16"},
    {"strategy": "multi-worker-mirrored", "compression": "float16"},
]


def gpu_run(**flags):
    return run_training(RunConfig(device_type="gpu", dtype="float64", **BASE, **flags), **QUIET)


@pytest.fixture(scope="module")
def gpu_oracle():
    """one-device on a double GPU: the oracle of the GPU runs."""
    with pytest.MonkeyPatch.context() as patch:
        from tests.gpu_double.runtime import SELECTOR

        patch.setenv("DTRAIN_GPU_RUNTIME", SELECTOR)
        result = gpu_run()
    assert result.summary["device_type"] == "gpu"
    return result


def test_one_device_on_the_double_gpu_computes_what_the_cpu_computes(gpu_oracle):
    cpu = run_training(RunConfig(device_type="cpu", dtype="float64", **BASE), **QUIET)
    for name, expected in cpu.parameters.items():
        np.testing.assert_array_equal(gpu_oracle.parameters[name], expected)


@pytest.mark.parametrize("flags", GPU_CONFIGURATIONS, ids=lambda f: "-".join(map(str, f.values())))
def test_every_synchronous_strategy_on_gpu_devices_matches_one_device(
    flags, gpu_oracle, cpu_double_gpus, no_leftover_processes
):
    if flags["strategy"] == "hybrid":
        flags = {**flags, "stages": 1}
    # Two workers and up to three parameter-server shards: one double GPU each.
    cpu_double_gpus.setenv("DTRAIN_FAKE_GPUS", str(max(4, 2 + flags.get("ps", 0))))
    result = gpu_run(devices=2, **flags)
    assert result.summary["device_type"] == "gpu"
    assert all("device:GPU" in device for device in {e.device for e in result.log.phases()})
    # float16 on the wire rounds every message: the oracle holds to its own tolerance.
    tolerance = 1e-3 if flags.get("compression") == "float16" else 1e-10
    assert_same_parameters(result, gpu_oracle, tolerance)


def test_float16_compression_on_device_buffers_is_the_cpu_computation(
    cpu_double_gpus, no_leftover_processes
):
    flags = {"strategy": "mirrored", "devices": 2, "allreduce": "ring", "compression": "float16"}
    on_gpu = gpu_run(**flags)
    on_cpu = run_training(RunConfig(device_type="cpu", dtype="float64", **BASE, **flags), **QUIET)
    for name, expected in on_cpu.parameters.items():
        np.testing.assert_array_equal(on_gpu.parameters[name], expected)
    assert on_gpu.summary["bytes_communicated"] == on_cpu.summary["bytes_communicated"]


def test_asynchronous_parameter_servers_train_on_gpu_devices(
    cpu_double_gpus, no_leftover_processes
):
    result = gpu_run(strategy="parameter-server", devices=2, ps=2, mode="async")
    assert result.summary["device_type"] == "gpu"
    assert np.isfinite(result.summary["final_loss"])
    assert result.summary["final_loss"] < result.log.scalars("loss")[0].value


def _routes(result, phases):
    return {e.path for e in result.log.phases() if e.phase in phases and e.bytes + e.bytes_received}


def test_events_say_how_device_tensors_travelled(cpu_double_gpus, no_leftover_processes):
    ring = gpu_run(strategy="mirrored", devices=2, allreduce="ring")
    assert _routes(ring, {"allreduce"}) == {"host-staged:shared-memory"}
    nccl = gpu_run(strategy="mirrored", devices=2)  # auto: NCCL on GPUs
    assert nccl.summary["allreduce"] == "nccl"
    assert _routes(nccl, {"allreduce"}) == {"device:nccl"}
    pipeline = gpu_run(strategy="pipeline", devices=2, stages=2)
    assert _routes(pipeline, {"send", "recv"}) == {"host-staged:shared-memory"}
    servers = gpu_run(strategy="parameter-server", devices=2, ps=1)
    assert _routes(servers, {"ps-pull", "ps-push"}) == {"host-staged:shared-memory"}


def test_without_shared_memory_device_tensors_go_through_dask_comms(
    cpu_double_gpus, no_leftover_processes
):
    cpu_double_gpus.setenv("DTRAIN_SHARED_MEMORY", "0")
    # Balanced by parameters, so that the graph is cut whatever this run measures of the TLS
    # link (the greedy placer may keep a small graph on one device when the link is slow).
    result = gpu_run(strategy="model-parallel", devices=2, placement="balanced-params")
    assert _routes(result, {"send", "recv"}) == {"host-staged:tls"}


def test_cpu_runs_report_cpu_routes(no_leftover_processes):
    result = run_training(
        RunConfig(strategy="mirrored", devices=2, device_type="cpu", **BASE), **QUIET
    )
    assert result.summary["allreduce"] == "ring"
    assert _routes(result, {"allreduce"}) == {"shared-memory"}


def _kernels_guarded_here() -> bool:
    from workbench.ir.rules import IMPL_RULES

    return all(getattr(kernel, "guarded", False) for kernel in IMPL_RULES.values())


def test_every_gpu_worker_runs_its_kernels_under_the_host_array_guard(
    cpu_double_gpus, no_leftover_processes
):
    from workbench.runtime.cluster import start_cluster

    with start_cluster(2, "gpu") as session:
        assert session.device_type == "gpu"
        assert session.device_names[1] == "/job:worker/task:1/device:GPU:0"
        guarded = session.client.run(_kernels_guarded_here, workers=session.addresses)
    assert list(guarded.values()) == [True, True]


@pytest.mark.parametrize(
    "flags",
    [
        {"strategy": "parameter-server", "devices": 2, "ps": 1},
        {"strategy": "mirrored", "devices": 2, "allreduce": "ring"},
    ],
    ids=lambda f: f["strategy"],
)
def test_without_shared_memory_device_tensors_are_staged_before_dasks_comms(
    flags, gpu_oracle, cpu_double_gpus, no_leftover_processes
):
    # Distributed cannot serialize device arrays without numba or rmm: pulls, pushes and
    # peer sends go through host memory, explicitly.
    cpu_double_gpus.setenv("DTRAIN_SHARED_MEMORY", "0")
    result = gpu_run(**flags)
    assert _routes(result, {"ps-pull", "ps-push", "allreduce"}) == {"host-staged:tls"}
    assert_same_parameters(result, gpu_oracle, 1e-10)
