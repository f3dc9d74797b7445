"""Mixed precision end to end: one-device and mirrored on 2 devices train digits to >= 0.95
test accuracy in float16 and in bfloat16, skip the step whose gradients overflow (on every
replica alike) and report it in the summary ``--json`` prints; mirrored runs through the CuPy
double too; a bfloat16 run on a CuPy without bfloat16 is refused before anything starts."""

import pytest

from workbench.config import ConfigError, RunConfig
from workbench.launch.runner import run_training

pytestmark = pytest.mark.integration

QUIET = {"progress": lambda _: None}
# The smallest run that clears 0.95 in both 16-bit types with a margin; step 3 overflows.
RUN = {
    "dataset": "digits",
    "hidden": (32,),
    "batch_size": 64,
    "steps": 200,
    "lr_decay": "none",
    "simulate_overflow": (3,),
}
HALF = {"mixed-fp16": "float16", "mixed-bf16": "bfloat16"}


def check_trained(result, precision: str) -> None:
    summary = result.summary
    assert summary["test_accuracy"] >= 0.95
    assert summary["precision"] == {
        "mode": precision,
        "compute_dtype": HALF[precision],
        "skipped_steps": 1,
        "loss_scale": 2.0**15,  # halved once from 2**16, never grown in 200 steps
    }
    assert all(value.dtype.name == "float32" for value in result.parameters.values())


@pytest.mark.parametrize("precision", list(HALF))
def test_one_device_trains_digits_in_16_bits(precision):
    check_trained(run_training(RunConfig(precision=precision, **RUN), **QUIET), precision)


@pytest.mark.parametrize("precision", list(HALF))
def test_mirrored_replicas_train_digits_in_16_bits_and_skip_alike(precision, no_leftover_processes):
    result = run_training(
        RunConfig(strategy="mirrored", devices=2, precision=precision, **RUN), **QUIET
    )
    check_trained(result, precision)


def test_mirrored_on_the_cupy_double_trains_in_float16(cpu_double_gpus, no_leftover_processes):
    result = run_training(
        RunConfig(strategy="mirrored", devices=2, device_type="gpu", precision="mixed-fp16", **RUN),
        **QUIET,
    )
    assert result.summary["device_type"] == "gpu"
    check_trained(result, "mixed-fp16")


def test_bfloat16_on_a_cupy_without_it_is_refused_before_the_cluster_starts(cpu_double_gpus):
    cpu_double_gpus.setenv("DTRAIN_FAKE_CUPY_BFLOAT16", "0")
    config = RunConfig(
        strategy="mirrored", devices=2, device_type="gpu", precision="mixed-bf16", **RUN
    )
    with pytest.raises(ConfigError) as refused:
        run_training(config, progress=pytest.fail)  # nothing may start: no progress at all
    assert refused.value.field == "--precision"
    assert "Unsupported dtype bfloat16" in str(refused.value)
    assert "mixed-fp16" in str(refused.value)


def test_a_joined_clusters_gpus_without_bfloat16_are_refused_before_their_setup(
    cpu_double_gpus, monkeypatch, no_leftover_processes
):
    """Where the run's GPUs are another machine's, the workers' device reports answer: the
    refusal comes once they report, before any replica is set up."""
    cpu_double_gpus.setenv("DTRAIN_FAKE_CUPY_BFLOAT16", "0")
    monkeypatch.setattr("workbench.launch.runner.check_precision_on_device", lambda *_: None)
    config = RunConfig(
        strategy="mirrored", devices=2, device_type="gpu", precision="mixed-bf16", **RUN
    )
    with pytest.raises(ConfigError) as refused:
        run_training(config, **QUIET)
    assert refused.value.field == "--precision"
    assert "Unsupported dtype bfloat16" in str(refused.value)
