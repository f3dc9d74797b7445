"""Synthetic data: seeded, learnable, and strict about its spec."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.data import Dataset, DatasetError, load_dataset


def nearest_centroid_accuracy(ds: Dataset) -> float:
    centroids = np.stack([ds.x_train[ds.y_train == c].mean(0) for c in range(ds.num_classes)])
    distances = ((ds.x_test[:, None, :] - centroids[None]) ** 2).sum(-1)
    return float((distances.argmin(1) == ds.y_test).mean())


def test_shapes_dtypes_ranges_and_name() -> None:
    ds = load_dataset("synthetic:20:4:600", seed=7)
    assert ds.name == "synthetic:20:4:600"
    assert ds.input_shape == (20,)
    assert ds.num_classes == 4
    assert ds.x_train.shape == (500, 20)
    assert ds.x_test.shape == (100, 20)  # 1/6 held out
    assert ds.x_train.dtype == ds.x_test.dtype == np.float64
    assert ds.y_train.dtype == ds.y_test.dtype == np.int64
    for x in (ds.x_train, ds.x_test):
        assert x.min() >= 0.0 and x.max() <= 1.0
    for y in (ds.y_train, ds.y_test):
        assert set(y.tolist()) == {0, 1, 2, 3}


def test_classes_are_balanced_in_each_split() -> None:
    ds = load_dataset("synthetic:5:3:60", seed=0)
    assert np.bincount(ds.y_train).tolist() == [17, 17, 16]
    assert np.bincount(ds.y_test).tolist() == [4, 3, 3]


def test_same_seed_gives_identical_arrays_and_other_seeds_differ() -> None:
    first = load_dataset("synthetic:16:3:120", seed=11)
    again = load_dataset("synthetic:16:3:120", seed=11)
    other = load_dataset("synthetic:16:3:120", seed=12)
    for name in ("x_train", "y_train", "x_test", "y_test"):
        np.testing.assert_array_equal(getattr(first, name), getattr(again, name))
    assert not np.array_equal(first.x_train, other.x_train)


def test_data_is_learnable() -> None:
    ds = load_dataset("synthetic:64:5:1200", seed=3)
    # Far above the 20% chance level even for the simplest classifier.
    assert nearest_centroid_accuracy(ds) > 0.9


def test_plain_synthetic_is_the_mnist_sized_default() -> None:
    ds = load_dataset("synthetic", seed=0)
    assert ds.name == "synthetic:784:10:60000"
    assert ds.x_train.shape == (50000, 784)
    assert ds.x_test.shape == (10000, 784)
    assert ds.num_classes == 10


@pytest.mark.parametrize(
    ("spec", "field", "hint"),
    [
        ("synthetic:0:10:100", "FEATURES", "positive integer"),
        ("synthetic:-5:10:100", "FEATURES", "positive integer"),
        ("synthetic:abc:10:100", "FEATURES", "positive integer"),
        ("synthetic:784:1:100", "CLASSES", ">= 2"),
        ("synthetic:784:2.5:100", "CLASSES", "positive integer"),
        ("synthetic:784:10:19", "SAMPLES", ">= 2*CLASSES"),
        ("synthetic:784:10:1e5", "SAMPLES", "positive integer"),
        ("synthetic:784:10", "FEATURES:CLASSES:SAMPLES", "three positive integers"),
        ("synthetic:784:10:100:5", "FEATURES:CLASSES:SAMPLES", "three positive integers"),
    ],
)
def test_bad_numbers_name_the_field_and_the_allowed_range(spec: str, field: str, hint: str) -> None:
    with pytest.raises(DatasetError) as raised:
        load_dataset(spec)
    assert field in str(raised.value)
    assert hint in str(raised.value)


def test_smallest_allowed_problem_still_has_a_test_set() -> None:
    ds = load_dataset("synthetic:3:2:4", seed=0)
    assert len(ds.y_test) >= 1
    assert set(ds.y_train.tolist()) == {0, 1}
