"""The in-memory `Dataset` every loader returns, and the one error type they raise."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


class DatasetError(ValueError):
    """A dataset spec, file or sampler argument is invalid.

    The message always names the offending thing (the spec, the full file path or the argument)
    and says what is wrong, so it can be shown to a user as is.
    """


# eq=False: the generated __eq__/__hash__ would compare and hash NumPy arrays, which raises.
@dataclass(frozen=True, eq=False)
class Dataset:
    """A labelled classification dataset, fully loaded into host memory.

    Parameters
    ----------
    name : str
        Canonical name, e.g. ``"digits"``, ``"synthetic:784:10:60000"``, ``"mnist"``.
    x_train, x_test : numpy.ndarray
        float64 inputs of shape ``(n, *input_shape)``, values in ``[0, 1]`` (token ids, whole
        numbers, for ``tokens`` data sets).
    y_train, y_test : numpy.ndarray
        int64 class labels of shape ``(n,)``, each in ``[0, num_classes)``.
    input_shape : tuple of int
        ``(features,)`` for vector data, ``(channels, height, width)`` for images.
    num_classes : int
        Number of classes.

    Notes
    -----
    The arrays are made read-only: every strategy reads the same data (docs/architecture.md,
    "Same data, same result"), so an accidental in-place edit by one consumer must fail loudly
    instead of silently changing the data another strategy sees. Copy before modifying.

    Examples
    --------
    >>> import numpy as np
    >>> ds = Dataset("toy", np.zeros((4, 2)), np.array([0, 1, 0, 1]), np.ones((2, 2)),
    ...              np.array([1, 0]), (2,), 2)
    >>> ds.x_train.shape, ds.num_classes
    ((4, 2), 2)
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    input_shape: tuple[int, ...]
    num_classes: int

    def __post_init__(self) -> None:
        # A list from a caller would make equality checks against shape tuples fail later.
        object.__setattr__(self, "input_shape", tuple(int(size) for size in self.input_shape))
        # Cheap structural checks only (no value scans): they catch loader bugs, not user input.
        splits = (("train", self.x_train, self.y_train), ("test", self.x_test, self.y_test))
        for split, x, y in splits:
            if x.dtype != np.float64 or y.dtype != np.int64:
                raise DatasetError(
                    f"dataset {self.name!r}: {split} arrays must be float64/int64, "
                    f"got {x.dtype}/{y.dtype}"
                )
            if x.shape[1:] != self.input_shape or y.shape != x.shape[:1]:
                raise DatasetError(
                    f"dataset {self.name!r}: {split} shapes {x.shape} and {y.shape} do not match "
                    f"input_shape {self.input_shape}"
                )
            x.flags.writeable = False
            y.flags.writeable = False
        if self.num_classes < 2:
            raise DatasetError(f"dataset {self.name!r}: num_classes must be >= 2")

    def __repr__(self) -> str:
        return (
            f"Dataset(name={self.name!r}, train={len(self.y_train)}, test={len(self.y_test)}, "
            f"input_shape={self.input_shape}, num_classes={self.num_classes})"
        )
