"""Whole-model gradients (forward graph + autodiff + passes) agree with finite differences."""

import numpy as np
import pytest

from workbench.ir import Executable
from workbench.models import Conv2D, Dense, Flatten, LayerNorm, MaxPool2D, Sequential
from workbench.models.transformer import PositionEmbedding, TokenMean, TransformerBlock
from workbench.training import INPUTS, LABELS, build_training_graph

MODELS = {
    "mlp": (lambda: Sequential([Dense(6, "relu"), Dense(3)], (5,)), (5,)),
    "cnn": (
        lambda: Sequential(
            [Conv2D(2, 3, activation="relu"), MaxPool2D(2), Flatten(), Dense(3)], (1, 6, 6)
        ),
        (1, 6, 6),
    ),
    "transformer": (
        lambda: Sequential(
            [
                Dense(8),
                PositionEmbedding(),
                TransformerBlock(heads=2),
                LayerNorm(),
                TokenMean(),
                Dense(3),
            ],
            (4, 5),
        ),
        (4, 5),
    ),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_parameter_gradients_match_central_differences(name):
    make, shape = MODELS[name]
    model = make()
    rng = np.random.default_rng(0)
    batch = 3
    training = build_training_graph(model, None, batch, "float64")
    program = Executable(training.graph)
    feeds = {INPUTS: rng.normal(size=(batch, *shape)), LABELS: rng.integers(0, 3, batch)}
    state = model.init_parameters(0, "float64")
    analytic = program.run(feeds, state)
    step = 1e-6
    for param in training.parameter_names:
        flat = state[param].reshape(-1)
        for index in rng.choice(flat.size, size=min(4, flat.size), replace=False):
            original = flat[index]
            flat[index] = original + step
            up = program.run(feeds, state)["loss"]
            flat[index] = original - step
            down = program.run(feeds, state)["loss"]
            flat[index] = original
            numeric = (up - down) / (2 * step)
            got = analytic[f"grad/{param}"].reshape(-1)[index]
            assert got == pytest.approx(numeric, rel=1e-5, abs=1e-8), (param, index)
