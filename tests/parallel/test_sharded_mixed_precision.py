"""Mixed precision under sharded data parallelism (ZeRO 1/2/3 with fp16/bf16): on 2 devices
every stage trains digits to >= 0.95 test accuracy in float16 and in bfloat16, skips the
overflowed step on every rank alike and reports it, keeps float32 master shards and their
slots as optimizer state, and moves exactly the bytes derived here: gradients
reduce-scattered in float32, parameters all-gathered in 16 bits, and one all-reduce of N
float32 overflow flags per step; the planner predicts each device's measured peak. One run
goes through the CuPy double.

The MLP (64 inputs, hidden 32, 10 classes) has 64*32 + 32 + 32*10 + 10 = 2410 parameters, one
bucket at the default --bucket-mb, cut in two chunks of 1205 elements.
"""

import numpy as np
import pytest

from tests.parallel.test_mixed_precision_runs import HALF, check_trained
from workbench.config import RunConfig
from workbench.launch.runner import run_training
from workbench.models import build_model
from workbench.optim import make_optimizer
from workbench.planner.device_costs import described_costs
from workbench.planner.memory import predict_memory
from workbench.simulate import parse_cluster

pytestmark = pytest.mark.integration

QUIET = {"progress": lambda _: None}
ELEMENTS, RANKS, STEPS, OVERFLOW = 2410, 2, 200, 3
CHUNK = ELEMENTS // RANKS
# As the one-device and mirrored mixed-precision runs: the smallest that clears 0.95 in both
# 16-bit types; step 3 overflows.
RUN = {
    "dataset": "digits",
    "hidden": (32,),
    "batch_size": 64,
    "steps": STEPS,
    "lr_decay": "none",
    "simulate_overflow": (OVERFLOW,),
}


def sent(stage: int) -> int:
    """Bytes each rank sends in the run. A step: the bucket reduce-scattered in float32 (N-1
    chunks sent), then the N flags all-reduced (2(N-1) float32 elements); an applied step
    at stages 1 and 2 then all-gathers the updated 16-bit parameters (N-1 chunks), a skipped
    one does not. At stage 3 every step gathers the 16-bit bucket before forward and again
    before backward, and nothing after the update."""
    scatter = (RANKS - 1) * CHUNK * 4
    flags = 2 * (RANKS - 1) * 4
    gather = (RANKS - 1) * CHUNK * 2
    if stage == 3:
        return STEPS * (scatter + flags + 2 * gather)
    return STEPS * (scatter + flags) + (STEPS - 1) * gather


def predicted_peaks(config: RunConfig, devices: list[str]) -> list[int]:
    """The planner's peak per device (the costs matter only to model-parallel placement)."""
    model = build_model("mlp", (64,), 10, config.hidden)
    costs = described_costs(parse_cluster("dgx-h100,hosts=1,gpus-per-host=2"))
    peaks = predict_memory(config, model, make_optimizer(config.optimizer), devices, costs)
    return [peaks[device].total for device in devices]


def check(result, config: RunConfig) -> None:
    precision, stage = config.precision, config.options["zero_stage"]
    summary = result.summary
    check_trained(result, precision)
    assert [device["bytes_sent"] for device in summary["per_device"]] == [sent(stage)] * RANKS
    for device, memory in summary["memory"].items():
        # The float32 master shard and its momentum slot's shard: 4 + 4 bytes an element.
        assert memory["resident"]["optimizer"] == CHUNK * (4 + 4), device
        # The 16-bit copies: whole below stage 3, the rank's shard at stage 3.
        copies = ELEMENTS * 2 if stage < 3 else CHUNK * 2
        assert memory["resident"]["parameters"] == copies, device
    devices = [device["device"] for device in summary["per_device"]]
    measured = [summary["memory"][device]["peak_bytes"] for device in devices]
    assert predicted_peaks(config, devices) == measured


@pytest.mark.parametrize("precision", list(HALF))
@pytest.mark.parametrize("stage", [1, 2, 3])
def test_every_zero_stage_trains_digits_in_16_bits_and_skips_alike(
    stage, precision, no_leftover_processes
):
    config = RunConfig(
        strategy="sharded", devices=RANKS, zero_stage=stage, precision=precision, **RUN
    )
    check(run_training(config, **QUIET), config)


def test_stage_3_on_the_cupy_double_trains_in_float16(cpu_double_gpus, no_leftover_processes):
    config = RunConfig(
        strategy="sharded",
        devices=RANKS,
        zero_stage=3,
        device_type="gpu",
        precision="mixed-fp16",
        **RUN,
    )
    result = run_training(config, **QUIET)
    assert result.summary["device_type"] == "gpu"
    check(result, config)


def test_a_mixed_precision_checkpoint_holds_the_float32_masters_and_resumes_under_mirrored(
    tmp_path, no_leftover_processes
):
    """The 16-bit copies are not saved: stage 3's checkpoint is the float32 masters (Adam's
    moments and step count joined from the shards), and mirrored resumes it to the parameters
    of its own straight run."""
    flags = {**RUN, "devices": RANKS, "optimizer": "adam", "precision": "mixed-fp16"}
    flags.pop("simulate_overflow")
    straight = run_training(RunConfig(strategy="mirrored", **{**flags, "steps": 8}), **QUIET)
    saved = str(tmp_path / "ckpt")
    first = RunConfig(strategy="sharded", zero_stage=3, save=saved, **{**flags, "steps": 4})
    run_training(first, **QUIET)
    then = RunConfig(strategy="mirrored", resume=saved, **{**flags, "steps": 8})
    resumed = run_training(then, **QUIET)
    assert resumed.summary["first_step"] == 4
    assert resumed.parameters.keys() == straight.parameters.keys()
    for name, value in straight.parameters.items():
        assert resumed.parameters[name].dtype.name == "float32"
        np.testing.assert_allclose(resumed.parameters[name], value, rtol=1e-6, err_msg=name)
