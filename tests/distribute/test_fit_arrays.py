"""``model.fit(x=..., y=..., validation_data=...)``: the user's own NumPy arrays train exactly
as the named data set they came from (sent to the cluster's workers by the client), and bad
arrays are refused naming the argument, before anything starts."""

from __future__ import annotations

import numpy as np
import pytest

import workbench
from workbench import ConfigError, Dense, Flatten, Sequential
from workbench.data.digits import load_digits

OPTIONS = dict(steps=20, batch_size=32, dtype="float64", optimizer="sgd", seed=3)


def _model() -> Sequential:
    return Sequential([Flatten(), Dense(16, activation="relu"), Dense(10)], input_shape=(1, 8, 8))


def _digits_arrays():
    """The digits split as a user holds it: float inputs in [0, 1], integer labels."""
    digits = load_digits()
    x, x_val = (digits.model_inputs(split, "float64")[:] for split in ("train", "test"))
    return x, digits.y_train, x_val, digits.y_test


@pytest.mark.integration
@pytest.mark.parametrize("devices", [1, 2])
def test_fit_on_the_digits_arrays_reproduces_the_digits_run(devices):
    """Bit for bit, on one device in this process and on two workers that receive the
    arrays from the client (they could not load them by name)."""
    x, y, x_val, y_val = _digits_arrays()
    strategy = workbench.MirroredStrategy(devices=2) if devices == 2 else None

    def fit(**data):
        if strategy is None:
            return _model().fit(**data, **OPTIONS)
        with strategy.scope():
            model = _model()
        return model.fit(**data, **OPTIONS)

    named = fit(dataset="digits")
    mine = fit(x=x, y=y, validation_data=(x_val, y_val))
    assert mine.summary["dataset"].startswith("arrays:")
    assert mine.summary["devices"] == devices
    assert mine.summary["final_loss"] == named.summary["final_loss"]
    assert mine.summary["test_accuracy"] == named.summary["test_accuracy"]
    for name, value in named.parameters.items():
        np.testing.assert_array_equal(mine.parameters[name], value)


@pytest.mark.integration
def test_without_validation_data_the_last_fifth_is_held_out():
    x, y, _, _ = _digits_arrays()
    result = _model().fit(x=x[:100], y=y[:100], steps=2, batch_size=16)
    assert result.summary["steps"] == 2 and np.isfinite(result.summary["test_loss"])


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        ({"x": np.zeros((10, 1, 8, 8))}, "fit: give both x= and y="),
        ({"x": np.zeros((10, 1, 8, 8)), "y": np.zeros(9, int)}, "y must be one label per row of x"),
        (
            {"x": np.zeros((10, 1, 8, 8)), "y": np.arange(10) % 2, "validation_data": [1]},
            "validation_data must be a pair (x_val, y_val)",
        ),
        (
            {
                "x": np.zeros((10, 1, 8, 8)),
                "y": np.arange(10) % 2,
                "validation_data": (np.zeros((4, 1, 8, 8)), np.array([0, 1, -1, 0])),
            },
            "validation_data[1] has label -1",
        ),
        (
            {"x": np.full((10, 1, 8, 8), np.nan), "y": np.arange(10) % 2},
            "x holds NaN or infinity",
        ),
        (
            {"x": np.zeros((10, 1, 8, 8)), "y": np.arange(10) % 2, "dataset": "digits"},
            "dataset: give either dataset= or the arrays",
        ),
    ],
    ids=["no y", "label count", "validation not a pair", "negative label", "nan", "both"],
)
def test_bad_arrays_are_refused_naming_the_argument(arrays, message):
    with pytest.raises(ConfigError) as raised:
        _model().fit(steps=2, **arrays)
    assert message in str(raised.value)


def test_arrays_that_do_not_fit_the_model_are_refused():
    with pytest.raises(ConfigError, match=r"maps \(1, 8, 8\) to \(10,\).*inputs \(5,\)"):
        _model().fit(x=np.zeros((10, 5)), y=np.arange(10) % 2, steps=2)
