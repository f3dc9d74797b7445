"""Runs with ``--recompute`` end with the parameters of the same run without it, bit for bit:
recomputed activations are the same bits as kept ones (float64, a few steps), on CPUs and on
the GPU double; and the devices hold fewer activation bytes."""

import numpy as np
import pytest

from workbench.config import RunConfig
from workbench.launch.runner import run_training

pytestmark = pytest.mark.integration

COMMON = {"steps": 4, "hidden": (32, 16), "dtype": "float64", "lr_decay": "none"}
STRATEGIES = {
    "one-device": {"strategy": "one-device"},
    "mirrored-2": {"strategy": "mirrored", "devices": 2},
    "mirrored-4": {"strategy": "mirrored", "devices": 4, "batch_size": 64},
    "model-parallel-2": {
        "strategy": "model-parallel",
        "devices": 2,
        "placement": "balanced-params",
    },
    "pipeline-2": {"strategy": "pipeline", "devices": 2, "microbatches": 2, "schedule": "1f1b"},
    "mirrored-in-graph-2": {"strategy": "mirrored", "devices": 2, "replication": "in-graph"},
}
KEPT: dict = {}


def _run(**flags):
    options = {"device_type": "cpu", **COMMON, **flags}
    return run_training(RunConfig(**options), progress=lambda _: None)


def _kept(name: str):
    """The run of ``name`` without recomputation, on CPUs (once per module)."""
    if name not in KEPT:
        KEPT[name] = _run(**STRATEGIES[name])
    return KEPT[name]


def assert_bit_identical(result, reference):
    assert result.parameters.keys() == reference.parameters.keys()
    for name, expected in reference.parameters.items():
        assert np.array_equal(result.parameters[name], expected), name
    assert result.summary["final_loss"] == reference.summary["final_loss"]


def _activations(result) -> int:
    """The most activation bytes any device of the run held (its measured high-water)."""
    memory = result.summary["memory"]
    return max(device["by_category"]["activations"] for device in memory.values())


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_full_recomputation_ends_with_the_parameters_of_none(name, no_leftover_processes):
    kept = _kept(name)
    recomputed = _run(recompute="full", **STRATEGIES[name])
    assert_bit_identical(recomputed, kept)
    # A device running a partition of one client graph (model-parallel, in-graph towers)
    # peaks in forward, where recomputation saves nothing.
    if name not in ("model-parallel-2", "mirrored-in-graph-2"):
        # The devices ran the rewritten graphs: their measured activations are fewer.
        assert _activations(recomputed) < _activations(kept)


def test_pipeline_stages_on_the_gpu_double_end_where_the_cpu_run_without_it_ends(
    cpu_double_gpus, no_leftover_processes
):
    # The stages keep their stash as device arrays (the double refuses host arrays there).
    recomputed = _run(recompute="full", device_type="gpu", **STRATEGIES["pipeline-2"])
    assert recomputed.summary["device_type"] == "gpu"
    assert_bit_identical(recomputed, _kept("pipeline-2"))
