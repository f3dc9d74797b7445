"""The in-memory `Dataset` every loader returns, the one error type they raise, and the
conversion of stored inputs into the model's inputs, batch by batch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

# How inputs may be stored: images as the bytes their files hold (a quarter of float32's
# memory, an eighth of float64's), everything else as float64.
STORED_INPUT_DTYPES = (np.dtype(np.uint8), np.dtype(np.float64))


def to_model_inputs(stored: Any, scale: float, dtype: str) -> Any:
    """Stored input rows as the model reads them: ``stored / scale`` in ``dtype`` (token ids:
    whole numbers as int64). NumPy or CuPy rows alike.

    The division is done in float64 and only then cast, so every dtype gets the values that
    scaling the whole data set to float64 once would have given (the same bits, whichever
    rows a device converts).

    Examples
    --------
    >>> to_model_inputs(np.array([0, 8, 16], dtype=np.uint8), 16.0, "float32")
    array([0. , 0.5, 1. ], dtype=float32)
    """
    if np.dtype(dtype).kind in "iu":
        return stored.astype(dtype)
    values = stored.astype(np.float64, copy=False)  # gathered rows are already a copy
    if scale != 1.0:
        values = values / scale
    return values if np.dtype(dtype) == np.float64 else values.astype(dtype)


class ModelInputs:
    """Stored inputs that read as the model's: indexing converts just the rows it takes.

    A device keeps its data set as stored (bytes for images) and converts each batch, instead
    of holding a float copy of the whole set.

    Examples
    --------
    >>> inputs = ModelInputs(np.array([[0], [255]], dtype=np.uint8), 255.0, "float64")
    >>> inputs[np.array([1])], len(inputs)
    (array([[1.]]), 2)
    """

    def __init__(self, stored: Any, scale: float, dtype: str) -> None:
        self.stored, self.scale, self.dtype = stored, float(scale), dtype

    def __len__(self) -> int:
        return len(self.stored)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.stored.shape)

    def __getitem__(self, rows: Any) -> Any:
        return to_model_inputs(self.stored[rows], self.scale, self.dtype)


# The most classes a data set may have: a label is one of the model's outputs, so a single
# hostile label must not size the output layer (docs/security/files.md, "Sizes are checked
# before anything is allocated").
MAX_CLASSES = 1 << 16


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
        Inputs of shape ``(n, *input_shape)`` as stored: uint8 (images, as their files hold
        them) or float64; ``x / input_scale`` is what the model reads (in ``[0, 1]`` for
        images; token ids, whole numbers, for ``tokens`` data sets).
    y_train, y_test : numpy.ndarray
        int64 class labels of shape ``(n,)``, each in ``[0, num_classes)``.
    input_shape : tuple of int
        ``(features,)`` for vector data, ``(channels, height, width)`` for images.
    num_classes : int
        Number of classes.
    input_scale : float
        What stored inputs are divided by to give the model's (255 for bytes of images, 1 for
        float64 inputs): :meth:`model_inputs` and :func:`to_model_inputs` apply it.

    Notes
    -----
    The arrays are made read-only: every strategy reads the same data
    (docs/architecture/determinism.md, "Same data, same result"), so an accidental in-place
    edit by one consumer must fail loudly instead of silently changing the data another
    strategy sees. Copy before modifying.

    Examples
    --------
    >>> import numpy as np
    >>> ds = Dataset("toy", np.zeros((4, 2)), np.array([0, 1, 0, 1]), np.ones((2, 2)),
    ...              np.array([1, 0]), (2,), 2)
    >>> ds.x_train.shape, ds.num_classes
    ((4, 2), 2)
    >>> ds.model_inputs("train", "float32")[np.array([0])]
    array([[0., 0.]], dtype=float32)
    """

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    input_shape: tuple[int, ...]
    num_classes: int
    input_scale: float = 1.0

    def __post_init__(self) -> None:
        # A list from a caller would make equality checks against shape tuples fail later.
        object.__setattr__(self, "input_shape", tuple(int(size) for size in self.input_shape))
        # Cheap structural checks only (no value scans): they catch loader bugs, not user input.
        splits = (("train", self.x_train, self.y_train), ("test", self.x_test, self.y_test))
        for split, x, y in splits:
            if x.dtype not in STORED_INPUT_DTYPES or y.dtype != np.int64:
                raise DatasetError(
                    f"dataset {self.name!r}: {split} arrays must be uint8 or float64 / int64, "
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
        if not self.input_scale > 0:
            raise DatasetError(f"dataset {self.name!r}: input_scale must be > 0")

    def model_inputs(self, split: str, dtype: str) -> ModelInputs:
        """The ``train`` or ``test`` inputs as the model reads them, converted as rows are
        taken."""
        stored = self.x_train if split == "train" else self.x_test
        return ModelInputs(stored, self.input_scale, dtype)

    @property
    def nbytes(self) -> int:
        """Bytes its four arrays hold."""
        return sum(a.nbytes for a in (self.x_train, self.y_train, self.x_test, self.y_test))

    def __repr__(self) -> str:
        return (
            f"Dataset(name={self.name!r}, train={len(self.y_train)}, test={len(self.y_test)}, "
            f"input_shape={self.input_shape}, num_classes={self.num_classes})"
        )
