"""On a machine with NVIDIA GPUs and CuPy (``pytest -m gpu``; skipped elsewhere with the
reason): the same promises as the double's GPU-path tests, on the real device."""

import os

import numpy as np
import pytest

from tests.parallel.test_equivalence import BASE, assert_same_parameters
from workbench.config import RunConfig
from workbench.launch.runner import run_training
from workbench.runtime.gpu_runtime import gpu_runtime

RUNTIME = None if os.environ.get("DTRAIN_GPU_RUNTIME") else gpu_runtime()
pytestmark = [
    pytest.mark.integration,
    pytest.mark.gpu,
    pytest.mark.skipif(RUNTIME is None, reason="needs an NVIDIA GPU with CuPy"),
]
QUIET = {"progress": lambda _: None}


def gpu_run(**flags):
    return run_training(RunConfig(device_type="gpu", dtype="float64", **BASE, **flags), **QUIET)


def test_one_device_on_the_gpu_matches_the_cpu():
    on_gpu = gpu_run()
    on_cpu = run_training(RunConfig(device_type="cpu", dtype="float64", **BASE), **QUIET)
    assert on_gpu.summary["device_type"] == "gpu"
    assert_same_parameters(on_gpu, on_cpu, 1e-9)


@pytest.mark.parametrize(
    "flags",
    [
        {"strategy": "mirrored", "allreduce": "nccl"},
        {"strategy": "mirrored", "allreduce": "ring"},
        {"strategy": "central-storage"},
        {"strategy": "sharded", "zero_stage": 3},
        {"strategy": "parameter-server", "ps": 1},
        {"strategy": "pipeline", "stages": 2},
        {"strategy": "model-parallel"},
    ],
    ids=lambda f: "-".join(map(str, f.values())),
)
def test_every_strategy_on_the_gpus_matches_one_device(flags):
    devices = 2 + (1 if flags["strategy"] == "parameter-server" else 0)
    # Fewer GPUs than devices: the devices share them (--share-gpu), which NCCL refuses.
    share = RUNTIME.device_count() < devices
    if share and flags.get("allreduce") == "nccl":
        pytest.skip(f"nccl needs {devices} GPUs, this machine has {RUNTIME.device_count()}")
    result = gpu_run(devices=2, share_gpu=share, **flags)
    assert result.summary["device_type"] == "gpu"
    assert_same_parameters(result, gpu_run(), 1e-9)
    assert np.isfinite(result.summary["final_loss"])
