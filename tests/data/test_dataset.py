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
        {"y_test": np.array([1, 0], dtype=np.int32)},
        {"input_shape": (4,)},
        {"y_train": np.array([0, 1, 0], dtype=np.int64)},
        {"num_classes": 1},
    ],
    ids=["float32 inputs", "int32 labels", "wrong input_shape", "label count", "one class"],
)
def test_inconsistent_fields_are_rejected(overrides: dict[str, object]) -> None:
    with pytest.raises(DatasetError, match="toy"):
        make(**overrides)
