"""``--dataset npz:PATH``: the user's own arrays reproduce the bundled data set's run exactly,
and every malformed file is refused naming the array at fault."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.config import ConfigError, RunConfig
from workbench.data import DatasetError, load_dataset
from workbench.data.digits import load_digits
from workbench.data.npz import load_npz
from workbench.launch.runner import run_training


@pytest.fixture
def digits_npz(tmp_path):
    digits = load_digits()
    path = tmp_path / "digits.npz"
    np.savez(  # the inputs as a user has them: floats in [0, 1]
        path,
        x_train=digits.model_inputs("train", "float64")[:],
        y_train=digits.y_train,
        x_test=digits.model_inputs("test", "float64")[:],
        y_test=digits.y_test,
    )
    return path


@pytest.mark.integration
@pytest.mark.parametrize("strategy", ["one-device", "mirrored"])
def test_the_digits_arrays_as_npz_reproduce_the_digits_run(digits_npz, strategy):
    """Bit for bit: one device in this process, and two devices whose workers each read the
    file themselves."""
    run = dict(steps=30, batch_size=32, dtype="float64", hidden=(16,), strategy=strategy)
    run["devices"] = 2 if strategy == "mirrored" else 1
    bundled = run_training(RunConfig(**run, dataset="digits"), progress=lambda _: None)
    mine = run_training(RunConfig(**run, dataset=f"npz:{digits_npz}"), progress=lambda _: None)
    assert mine.summary["final_loss"] == bundled.summary["final_loss"]
    assert mine.summary["test_accuracy"] == bundled.summary["test_accuracy"]
    for name, value in bundled.parameters.items():
        np.testing.assert_array_equal(mine.parameters[name], value)


def test_without_a_test_split_the_last_fifth_is_held_out(tmp_path):
    path = tmp_path / "train_only.npz"
    x = np.arange(100, dtype=np.float32).reshape(50, 2) / 100
    np.savez(path, x_train=x, y_train=np.arange(50) % 4)
    data = load_dataset(f"npz:{path}")
    assert len(data.x_train) == 40 and len(data.x_test) == 10
    np.testing.assert_array_equal(data.x_test, x[40:].astype(np.float64))
    assert data.num_classes == 4 and data.x_train.dtype == np.float64


def test_uint8_images_are_scaled_into_zero_one(tmp_path):
    path = tmp_path / "images.npz"
    images = np.full((6, 1, 2, 2), 255, np.uint8)
    np.savez(path, x_train=images[:4], y_train=[0, 1, 0, 1], x_test=images[4:], y_test=[1, 0])
    data = load_npz(path)
    assert data.input_shape == (1, 2, 2) and data.x_train.dtype == np.uint8  # kept as bytes
    assert float(data.model_inputs("train", "float64")[:].max()) == 1.0


GOOD = dict(
    x_train=np.zeros((4, 3)),
    y_train=np.array([0, 1, 0, 1]),
    x_test=np.zeros((2, 3)),
    y_test=np.array([1, 0]),
)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"y_train": None}, "no array 'y_train' (it has: x_test, x_train, y_test"),
        ({"y_test": None}, "no array 'y_test'"),
        ({"x_train": np.zeros(4)}, "x_train must hold at least one row of features"),
        ({"x_test": np.zeros((2, 5))}, "x_test's rows have shape (5,), x_train's (3,)"),
        ({"y_train": np.array([0, 1, 0])}, "y_train must be one label per row of x_train (4)"),
        ({"y_train": np.array([0, 1.5, 0, 1])}, "y_train must be whole-number class labels"),
        ({"y_test": np.array([-1, 0])}, "y_test has label -1; labels start at 0"),
        ({"x_train": np.array([[np.nan] * 3] * 4)}, "x_train holds NaN or infinity"),
        ({"x_train": np.array([["a"] * 3] * 4)}, "x_train must be numbers"),
        ({"y_train": np.zeros(4, int), "y_test": np.zeros(2, int)}, "one class only"),
    ],
)
def test_a_malformed_file_is_refused_naming_the_array(tmp_path, change, message):
    arrays = {name: value for name, value in {**GOOD, **change}.items() if value is not None}
    path = tmp_path / "bad.npz"
    np.savez(path, **arrays)
    with pytest.raises(DatasetError) as raised:
        load_dataset(f"npz:{path}")
    assert message in str(raised.value) and str(path) in str(raised.value)


def test_a_missing_or_unreadable_file_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match=r"npz file /no/such\.npz does not exist"):
        run_training(RunConfig(dataset="npz:/no/such.npz"), progress=lambda _: None)
    broken = tmp_path / "broken.npz"
    broken.write_bytes(b"not a zip")
    with pytest.raises(DatasetError, match="cannot read npz file"):
        load_dataset(f"npz:{broken}")
