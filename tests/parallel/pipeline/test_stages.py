"""Splitting models into stages."""

import pytest

from workbench.models import build_model
from workbench.parallel.pipeline.stages import StageError, split_layers


def test_stages_cover_every_layer_once_in_order():
    model = build_model("mlp", (64,), 10, (32, 32, 32))
    for stages in range(1, len(model.layers) + 1):
        ranges = split_layers(model, stages)
        assert [i for r in ranges for i in r] == list(range(len(model.layers)))
        assert all(len(r) >= 1 for r in ranges)


def test_more_stages_than_layers_names_the_flag():
    model = build_model("mlp", (64,), 10, (32,))
    with pytest.raises(StageError, match="--stages: 5 stages need at least as many layers"):
        split_layers(model, 5)
