"""Splitting models into stages."""

import pytest

from workbench.config import ConfigError, RunConfig
from workbench.models import build_model
from workbench.parallel.pipeline.stages import StageError, split_layers
from workbench.strategies import STRATEGIES, validate_config


def test_stages_cover_every_layer_once_in_order():
    model = build_model("mlp", (64,), 10, (32, 32, 32))
    for stages in range(1, len(model.layers) + 1):
        ranges = split_layers(model, stages)
        assert [i for r in ranges for i in r] == list(range(len(model.layers)))
        assert all(len(r) >= 1 for r in ranges)


def test_more_stages_than_layers_names_the_flag():
    model = build_model("mlp", (64,), 10, (32,))
    with pytest.raises(StageError) as raised:
        split_layers(model, 5)
    assert (raised.value.parts, raised.value.layers) == (5, len(model.layers))
    # Each strategy names its own flag from those fields (no rewriting of the message).
    config = RunConfig(strategy="pipeline", devices=5, stages=5, batch_size=40)
    with pytest.raises(ConfigError, match="--stages: 5 stages need at least as many layers"):
        STRATEGIES["pipeline"].check_model(validate_config(config), model)
    config = RunConfig(strategy="model-parallel", devices=5, placement="balanced-params")
    with pytest.raises(ConfigError, match="--devices: 5 devices need at least as many layers"):
        STRATEGIES["model-parallel"].check_model(validate_config(config), model)
    # The greedy placer may leave devices without nodes: it takes the model.
    greedy = validate_config(config.replace(placement="greedy"))
    STRATEGIES["model-parallel"].check_model(greedy, model)
