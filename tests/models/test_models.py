"""Models build the parameters and graphs users expect and reject shapes that cannot work."""

import numpy as np
import pytest

from workbench.ir import GraphBuilder, evaluate
from workbench.models import (
    ApplyContext,
    AvgPool2D,
    Conv2D,
    Dense,
    Dropout,
    Embedding,
    Flatten,
    LayerNorm,
    MaxPool2D,
    ModelError,
    Sequential,
    build_model,
)


def test_mlp_parameters_are_named_by_layer_path_with_expected_shapes():
    model = build_model("mlp", (1, 8, 8), 10, hidden=(32, 16))
    assert model.parameter_shapes() == {
        "dense_0/kernel": (64, 32),
        "dense_0/bias": (32,),
        "dense_1/kernel": (32, 16),
        "dense_1/bias": (16,),
        "dense_2/kernel": (16, 10),
        "dense_2/bias": (10,),
    }


def test_initialisation_is_seeded_and_dtype_independent():
    model = build_model("mlp", (20,), 3, hidden=(8,))
    a, b = model.init_parameters(1, "float64"), model.init_parameters(1, "float64")
    c = model.init_parameters(2, "float64")
    low = model.init_parameters(1, "float32")
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])
        assert low[name].dtype == np.float32
        np.testing.assert_array_equal(low[name], a[name].astype(np.float32))
    assert not np.array_equal(a["dense_0/kernel"], c["dense_0/kernel"])


@pytest.mark.parametrize(
    ("shape", "flat"),
    [((1, 8, 8), 64 * 4 * 4), ((1, 28, 28), 64 * 7 * 7), ((3, 32, 32), 64 * 8 * 8)],
)
def test_cnn_preset_fits_digits_mnist_and_cifar(shape, flat):
    model = build_model("cnn", shape, 10)
    assert model.parameter_shapes()["dense_0/kernel"] == (flat, 128)
    assert model.output_shape == (10,)


@pytest.mark.parametrize(
    ("layers", "shape", "message"),
    [
        ([Dense(4)], (1, 8, 8), "Flatten"),
        ([Conv2D(4, 3)], (64,), "channels, height, width"),
        ([Conv2D(4, 9, padding="valid")], (1, 8, 8), "does not fit"),
        ([MaxPool2D(16)], (1, 8, 8), "pool"),
    ],
)
def test_models_that_cannot_fit_their_input_fail_at_definition(layers, shape, message):
    with pytest.raises(ModelError, match=message):
        Sequential(layers, shape)


@pytest.mark.parametrize(
    "make",
    [lambda: Dense(4, activation="swish"), lambda: Dropout(1.0), lambda: Conv2D(4, 2)],
)
def test_bad_layer_options_are_refused(make):
    with pytest.raises(ModelError):
        make()


def test_cnn_needs_images():
    with pytest.raises(ModelError, match="image input"):
        build_model("cnn", (64,), 10)


def test_every_layer_kind_runs_forward():
    rng = np.random.default_rng(0)
    image_model = Sequential(
        [
            Conv2D(3, 3, activation="relu"),
            AvgPool2D(2),
            MaxPool2D(2, stride=1),
            Flatten(),
            LayerNorm(),
            Dropout(0.5),
            Dense(4, activation="gelu"),
            Dense(2),
        ],
        (1, 6, 6),
    )
    token_model = Sequential([Embedding(11, 5), Flatten(), Dense(2, activation="tanh")], (3,))
    for model, x in [
        (image_model, rng.normal(size=(2, 1, 6, 6))),
        (token_model, rng.integers(0, 11, size=(2, 3))),
    ]:
        b = GraphBuilder()
        xt = b.placeholder("x", x.shape, str(x.dtype))
        params = {n: b.variable(n, s, "float64") for n, s in model.parameter_shapes().items()}
        seed = b.placeholder("seed", (), "int64")
        logits = model.apply(xt, params, ApplyContext(training=True, dropout_seed=seed))
        out = evaluate(
            b.build({"logits": logits}),
            {"x": x, "seed": np.int64(1)},
            model.init_parameters(0, "float64"),
        )
        assert out["logits"].shape == (2, 2) and np.all(np.isfinite(out["logits"]))
