"""The Dataset container: its structural checks and immutability."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.data import Dataset, DatasetError


def make(**overrides: object) -> Dataset:
    fields: dict[str, object] = {
        "name": "toy",
        "x_train": np.zeros((4, 3)),
        "y_train": np.array([0, 1, 0, 1], dtype=np.int64),
        "x_test": np.zeros((2, 3)),
        "y_test": np.array([1, 0], dtype=np.int64),
        "input_shape": (3,),
        "num_classes": 2,
    }
    fields.update(overrides)
    return Dataset(**fields)  # type: ignore[arg-type]


def test_valid_dataset_is_frozen_and_read_only() -> None:
    ds = make(input_shape=[3])
    assert ds.input_shape == (3,)
    with pytest.raises(AttributeError):
        ds.name = "other"  # type: ignore[misc]
    with pytest.raises(ValueError, match="read-only"):
        ds.x_train[0, 0] = 1.0


@pytest.mark.parametrize(
    "overrides",
    [
        {"x_train": np.zeros((4, 3), dtype=np.float32)},
        {"input_scale": 0.0},
        {"y_test": np.array([1, 0], dtype=np.int32)},
        {"input_shape": (4,)},
        {"y_train": np.array([0, 1, 0], dtype=np.int64)},
        {"num_classes": 1},
    ],
    ids=[
        "float32 inputs",
        "zero scale",
        "int32 labels",
        "wrong input_shape",
        "label count",
        "one class",
    ],
)
def test_inconsistent_fields_are_rejected(overrides: dict[str, object]) -> None:
    with pytest.raises(DatasetError, match="toy"):
        make(**overrides)


def test_images_stay_bytes_and_the_model_reads_them_scaled() -> None:
    stored = np.array([[0, 51], [255, 102]], dtype=np.uint8)
    ds = Dataset("bytes", stored, np.array([0, 1]), stored, np.array([1, 0]), (2,), 2, 255.0)
    assert ds.x_train.dtype == np.uint8 and ds.nbytes == 4 + 16 + 4 + 16
    inputs = ds.model_inputs("train", "float64")
    assert len(inputs) == 2 and inputs.shape == (2, 2)
    np.testing.assert_array_equal(inputs[np.array([1, 0])], [[1.0, 0.4], [0.0, 0.2]])
    assert ds.model_inputs("test", "float32")[0:1].dtype == np.float32
