"""The embedded digits dataset: shapes, scaling, and a split that never moves."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.datasets import load_digits as sklearn_load_digits

from workbench.data import Dataset, load_dataset


@pytest.fixture(scope="module")
def digits() -> Dataset:
    return load_dataset("digits")


def test_shapes_dtypes_and_metadata(digits: Dataset) -> None:
    assert digits.name == "digits"
    assert digits.input_shape == (1, 8, 8)
    assert digits.num_classes == 10
    assert digits.x_train.shape == (1437, 1, 8, 8)
    assert digits.x_test.shape == (360, 1, 8, 8)
    assert digits.y_train.shape == (1437,)
    assert digits.y_test.shape == (360,)
    for array in (digits.x_train, digits.x_test):
        assert array.dtype == np.uint8  # stored as the pixel counts
    assert digits.input_scale == 16.0
    for array in (digits.y_train, digits.y_test):
        assert array.dtype == np.int64


def test_the_model_reads_pixels_in_the_unit_range(digits: Dataset) -> None:
    for split in ("train", "test"):
        inputs = digits.model_inputs(split, "float64")[:]
        assert inputs.dtype == np.float64
        assert inputs.min() == 0.0
        assert inputs.max() == 1.0
        # Pixels were counts 0..16, so scaled values sit on a grid of sixteenths.
        np.testing.assert_array_equal(inputs * 16, np.round(inputs * 16))
    # float32 inputs are the float64 values rounded once, whichever rows are taken.
    rows = np.array([5, 0, 1436])
    np.testing.assert_array_equal(
        digits.model_inputs("train", "float32")[rows],
        digits.model_inputs("train", "float64")[:][rows].astype(np.float32),
    )


def test_split_is_a_partition_of_the_bundled_data(digits: Dataset) -> None:
    bunch = sklearn_load_digits()
    pixels = bunch.images.reshape(len(bunch.images), -1) / 16
    expected = np.concatenate([pixels, bunch.target[:, None]], 1)
    ours = np.concatenate(
        [
            np.concatenate([digits.x_train.reshape(1437, -1) / 16, digits.y_train[:, None]], 1),
            np.concatenate([digits.x_test.reshape(360, -1) / 16, digits.y_test[:, None]], 1),
        ]
    )
    # Same multiset of (image, label) rows: nothing lost, duplicated or relabelled.
    np.testing.assert_array_equal(np.unique(ours, axis=0), np.unique(expected, axis=0))
    assert len(ours) == len(expected)


def test_split_is_stratified(digits: Dataset) -> None:
    train_counts = np.bincount(digits.y_train, minlength=10)
    test_counts = np.bincount(digits.y_test, minlength=10)
    assert set(digits.y_test.tolist()) == set(range(10))
    fractions = test_counts / (train_counts + test_counts)
    assert np.all(np.abs(fractions - 0.2) < 0.02)


def test_split_does_not_depend_on_the_run_seed(digits: Dataset) -> None:
    other = load_dataset("digits", seed=12345)
    np.testing.assert_array_equal(other.x_train, digits.x_train)
    np.testing.assert_array_equal(other.y_train, digits.y_train)
    np.testing.assert_array_equal(other.x_test, digits.x_test)
    np.testing.assert_array_equal(other.y_test, digits.y_test)


def test_arrays_are_read_only(digits: Dataset) -> None:
    with pytest.raises(ValueError, match="read-only"):
        digits.x_train[0, 0, 0, 0] = 5
    with pytest.raises(ValueError, match="read-only"):
        digits.y_test[0] = 3
