"""Interleaved 1F1B and zero-bubble settings a pipeline cannot run are refused, naming the
flag, by the checks a run makes before anything starts (``prepare_run``: no cluster)."""

import pytest

from workbench.config import ConfigError, RunConfig
from workbench.launch.runner import prepare_run

PIPELINE = {"strategy": "pipeline", "devices": 2, "stages": 2}
HYBRID = {"strategy": "hybrid", "devices": 4, "stages": 2}


def _refusal(**flags) -> ConfigError:
    with pytest.raises(ConfigError) as raised:
        prepare_run(RunConfig(**flags))
    return raised.value


@pytest.mark.parametrize("mesh", [PIPELINE, HYBRID], ids=["pipeline", "hybrid"])
def test_virtual_stages_apply_only_to_interleaved_1f1b(mesh):
    error = _refusal(**mesh, schedule="1f1b", virtual_stages=3)
    assert error.field == "--virtual-stages"
    assert "applies only with --schedule interleaved-1f1b" in str(error)


@pytest.mark.parametrize("mesh", [PIPELINE, HYBRID], ids=["pipeline", "hybrid"])
def test_interleaving_takes_micro_batches_in_groups_of_the_stages(mesh):
    error = _refusal(
        **mesh, schedule="interleaved-1f1b", microbatches=3, batch_size=48, virtual_stages=2
    )
    assert error.field == "--microbatches"
    assert "multiple of --stages 2" in str(error)


@pytest.mark.parametrize("mesh", [PIPELINE, HYBRID], ids=["pipeline", "hybrid"])
def test_more_model_chunks_than_layers_names_virtual_stages(mesh):
    # Digits' images: a Flatten, then two Dense layers; fewer than 2 stages x 2 virtual stages.
    error = _refusal(**mesh, schedule="interleaved-1f1b", virtual_stages=2, hidden=(32,))
    assert error.field == "--virtual-stages"
    assert "4 model chunks need at least as many layers; the model has 3" in str(error)


@pytest.mark.parametrize(
    "flags",
    [
        {"schedule": "interleaved-1f1b", "virtual_stages": 2, "hidden": (16, 16, 16)},
        {"schedule": "zero-bubble", "hidden": (32, 16)},
        {"schedule": "zero-bubble", "model": "transformer", "recompute": "full"},
    ],
    ids=["interleaved", "zero-bubble-mlp", "zero-bubble-transformer"],
)
def test_runnable_schedules_pass_every_check(flags):
    """Zero-bubble refuses no model: every stage's backward splits into its two halves."""
    prepared = prepare_run(RunConfig(**PIPELINE, **flags))
    assert prepared.job.config.options["schedule"] == flags["schedule"]
