"""Every run measures what each device held: ``--json``'s ``memory`` object, per device, from
the ledgers the devices keep (docs/guide/command-line.md, "Measured memory")."""

import math

import numpy as np
import pytest

from workbench.config import RunConfig
from workbench.events import EventLog
from workbench.events.memory_summary import largest_peak_line, memory_scalars, memory_summary
from workbench.ir.memory import CATEGORIES
from workbench.launch.runner import run_training
from workbench.models import mlp
from workbench.runtime.device_memory import DeviceMemory

QUIET = {"progress": lambda _: None}
SMALL = {"steps": 2, "hidden": (16,), "lr_decay": "none", "dtype": "float64"}


def run(**flags):
    return run_training(RunConfig(**{**SMALL, **flags}), **QUIET)


def model_bytes(itemsize: int = 8) -> int:
    shapes = mlp((64,), 10, SMALL["hidden"]).parameter_shapes().values()
    return sum(math.prod(shape) for shape in shapes) * itemsize


def test_the_summary_keeps_each_devices_largest_report_and_category_high_waters():
    log = EventLog()
    first = {"parameters": 10, "activations": 50}
    for name, step, value, device in [
        *memory_scalars("d0", 0, 60, first, first, 4096, None),
        *memory_scalars(
            "d0", 9, 40, {"parameters": 10}, {"parameters": 10, "gradients": 30}, 8192, 512
        ),
    ]:
        log.scalar(name, step, value, 0.0, device=device)
    log.scalar("loss", 0, 1.0, 0.0)
    summary = memory_summary(log, ["d0", "d1"])
    assert summary == {
        "d0": {
            "peak_bytes": 60,
            "at_peak": first,
            "by_category": {"parameters": 10, "activations": 50, "gradients": 30},
            "rss_peak_bytes": 8192,
            "gpu_pool_peak_bytes": 512,
        }
    }
    assert largest_peak_line(summary) == "peak memory 60 B on d0: parameters 10 B, activations 50 B"


@pytest.mark.integration
def test_one_device_counts_its_parameters_and_momentum_slots_exactly():
    result = run()
    (device,) = result.summary["memory"]
    memory = result.summary["memory"][device]
    assert set(memory["at_peak"]) == set(CATEGORIES)
    assert memory["by_category"]["parameters"] == model_bytes()
    assert memory["by_category"]["optimizer"] == model_bytes()  # momentum: one slot each
    assert memory["by_category"]["activations"] > 0
    assert memory["peak_bytes"] == sum(memory["at_peak"].values())
    assert memory["peak_bytes"] > 2 * model_bytes()
    assert memory["rss_peak_bytes"] > memory["peak_bytes"]
    assert "gpu_pool_peak_bytes" not in memory


@pytest.mark.integration
@pytest.mark.gpu_path
def test_the_gpu_path_reports_its_memory_pool(cpu_double_gpus):
    result = run(device_type="gpu")
    ((device, memory),) = result.summary["memory"].items()
    assert "GPU" in device
    assert memory["gpu_pool_peak_bytes"] >= 2 * model_bytes()  # at least the resident state
    assert memory["by_category"]["parameters"] == model_bytes()


@pytest.mark.integration
def test_mirrored_devices_each_report_their_packed_bucket(no_leftover_processes):
    result = run(strategy="mirrored", devices=2)
    memory = result.summary["memory"]
    assert len(memory) == 2
    for entry in memory.values():
        assert entry["by_category"]["parameters"] == model_bytes()
        assert entry["by_category"]["communication"] == model_bytes()  # one bucket, all of it
        assert entry["by_category"]["gradients"] == model_bytes()


@pytest.mark.integration
def test_one_f_one_b_keeps_fewer_activations_than_gpipe(no_leftover_processes):
    flags = {"strategy": "pipeline", "devices": 2, "microbatches": 8}
    gpipe = run(**flags, schedule="gpipe").summary["memory"]
    one_f_one_b = run(**flags, schedule="1f1b").summary["memory"]
    for device, entry in gpipe.items():
        assert (
            one_f_one_b[device]["by_category"]["activations"] < entry["by_category"]["activations"]
        )


def test_a_report_carries_what_the_device_held_when_its_steps_began():
    memory = DeviceMemory("d0", np)
    flat = np.zeros(100)  # a bucket's whole parameters, kept; the state names a slice of it
    state = {"shard/0": flat[:50], "shard/0/momentum": np.zeros(50)}
    with memory.step(state) as ledger:
        ledger.hold_array("activations", np.ones(10))
    log = EventLog()
    for name, step, value, device in memory.report(0):
        log.scalar(name, step, value, 0.0, device=device)
    entry = memory_summary(log, ["d0"])["d0"]
    assert entry["resident_bytes"] == 1200
    assert entry["resident"] == {
        "parameters": 800,
        "optimizer": 400,
        "gradients": 0,
        "activations": 0,
        "communication": 0,
    }
    assert entry["peak_bytes"] == 1280


@pytest.mark.integration
@pytest.mark.parametrize("stage", [1, 3])
def test_sharded_ranks_report_the_state_they_keep_between_steps(stage, no_leftover_processes):
    result = run(strategy="sharded", devices=2, zero_stage=stage)
    memory = result.summary["memory"]
    assert len(memory) == 2
    for entry in memory.values():
        resident = entry["resident"]
        # Stage 1 keeps the whole parameters (the buffer its shard is a slice of); stage 3
        # only its half. Either way half the momentum.
        assert resident["parameters"] == (model_bytes() if stage == 1 else model_bytes() // 2)
        assert resident["optimizer"] == model_bytes() // 2
        assert entry["resident_bytes"] == resident["parameters"] + resident["optimizer"]
        assert resident["gradients"] == resident["activations"] == 0


@pytest.mark.integration
@pytest.mark.gpu_path
def test_a_stage_1_rank_on_the_gpu_path_keeps_the_whole_parameters(
    cpu_double_gpus, no_leftover_processes
):
    result = run(strategy="sharded", devices=2, zero_stage=1, device_type="gpu")
    for entry in result.summary["memory"].values():
        assert entry["resident"]["parameters"] == model_bytes()
        assert entry["resident"]["optimizer"] == model_bytes() // 2
