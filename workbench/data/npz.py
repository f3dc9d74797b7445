"""``--dataset npz:PATH``: the user's own arrays, from one ``.npz`` file.

The file holds ``x_train`` and ``y_train`` and, optionally, ``x_test`` and ``y_test``. Without
a test split the last fifth of the training rows, in the file's order, is held out for testing:
the same rows for every run and every strategy. It is read with ``allow_pickle=False`` (nothing
in a data file is ever unpickled). Inputs keep their meaning: floats become float64 as given
(the user's own scaling), uint8 images are read as byte / 255 in [0, 1] as the bundled image
sets are (and kept as bytes, converted batch by batch), other integers (token ids) stay whole
numbers. Labels are integers, or whole-number
floats, in ``0..C-1`` with C the largest label + 1 over both splits, and C at most
``MAX_CLASSES``. The file must be a regular file; each array's header is checked against its
bytes and the memory budget before it is read (:mod:`workbench.safe_io.bounded_npz`).
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

import numpy as np

from workbench.data.dataset import MAX_CLASSES, Dataset, DatasetError
from workbench.safe_io.bounded_npz import npz_entries, open_npz, read_npz_arrays
from workbench.safe_io.bounded_read import FileRefused, check_memory, open_regular

HELD_OUT = 0.2  # of the training rows, when the file has no test split
_MAX_PIXEL = 255.0
_REQUIRED = ("x_train", "y_train")
_TEST = ("x_test", "y_test")


def load_npz(path: str | Path) -> Dataset:
    """The data set in the ``.npz`` file at ``path``.

    Raises
    ------
    DatasetError
        Naming the file and the array at fault: a missing array (with the arrays the file
        has), a bad shape, dtype or label, NaN or infinity.

    Examples
    --------
    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> x = np.arange(40, dtype=np.uint8).reshape(10, 4)
    >>> np.savez(folder / "mine.npz", x_train=x, y_train=np.arange(10) % 3)
    >>> ds = load_npz(folder / "mine.npz")
    >>> ds.x_train.shape, ds.x_test.shape, ds.num_classes, ds.model_inputs("train", "float64")[7]
    ((8, 4), (2, 4), 3, array([0.10980392, 0.11372549, 0.11764706, 0.12156863]))
    """
    path = Path(path).expanduser()
    try:
        with open_regular(path) as handle, open_npz(str(path), handle) as archive:
            entries = npz_entries(str(path), archive)
            names = set(entries)
            missing = [name for name in _REQUIRED if name not in names]
            if missing or (("x_test" in names) != ("y_test" in names)):
                missing = missing or [name for name in _TEST if name not in names]
                raise DatasetError(
                    f"npz file {path} has no array {missing[0]!r} (it has: "
                    f"{', '.join(sorted(names)) or 'none'}; needed: x_train, y_train, and "
                    "optionally x_test with y_test)"
                )
            wanted = {name: entries[name] for name in (*_REQUIRED, *_TEST) if name in names}
            arrays = read_npz_arrays(str(path), archive, wanted)
        _check_conversion_memory(path, arrays)
    except FileRefused as error:
        raise DatasetError(f"cannot read npz file {error}") from None
    return arrays_dataset(f"npz:{path}", **arrays, source=str(path))


def _check_conversion_memory(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Inputs that are not all bytes become float64 (:func:`_as_inputs`): refuse, with the
    estimate, when that copy would not fit in memory beside the arrays read."""
    inputs = [array for name, array in arrays.items() if name.startswith("x_")]
    if all(array.dtype == np.uint8 for array in inputs):
        return
    converted = sum(array.size * np.dtype(np.float64).itemsize for array in inputs)
    read = sum(array.nbytes for array in arrays.values())
    check_memory(path, read + converted, "its arrays with the inputs as float64")


def arrays_dataset(
    name: str,
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_test: np.ndarray | None = None,
    y_test: np.ndarray | None = None,
    source: str = "the arrays",
) -> Dataset:
    """A :class:`Dataset` of the user's arrays, checked (errors name ``source`` and the
    array). Without ``x_test`` and ``y_test``, the last fifth of the training rows is held
    out for testing.

    Examples
    --------
    >>> ds = arrays_dataset("mine", np.ones((4, 2)), np.array([0, 1, 1, 0]),
    ...                     np.ones((2, 2)), np.array([1, 0]))
    >>> ds.input_shape, ds.num_classes
    ((2,), 2)
    """
    if (x_test is None) != (y_test is None):
        given, missing = ("x_test", "y_test") if y_test is None else ("y_test", "x_test")
        raise DatasetError(f"{source}: {given} is given without {missing}; give both or neither")
    if x_test is None:
        x_train, y_train = np.asarray(x_train), np.asarray(y_train)
        rows = len(x_train) if x_train.ndim else 0
        if y_train.ndim != 1 or len(y_train) != rows:  # before the rows are split
            raise DatasetError(
                f"{source}: y_train must be one label per row of x_train ({rows}), "
                f"got shape {y_train.shape}"
            )
        kept = rows - max(1, round(rows * HELD_OUT))  # the last fifth (at least a row) held out
        x_train, y_train, x_test, y_test = (
            x_train[:kept],
            y_train[:kept],
            x_train[kept:],
            y_train[kept:],
        )
    inputs = {"x_train": x_train, "x_test": x_test}
    # y_test is given with x_test (checked above) or split off the training rows.
    labels = {"y_train": y_train, "y_test": cast(np.ndarray, y_test)}
    for key, x in inputs.items():
        x = np.asarray(x)
        if x.ndim < 2 or len(x) == 0:
            raise DatasetError(
                f"{source}: {key} must hold at least one row of features (shape (rows, ...)), "
                f"got shape {x.shape}"
            )
        if x.dtype.kind not in "fiub":
            raise DatasetError(f"{source}: {key} must be numbers, got dtype {x.dtype}")
        if x.dtype.kind == "f" and not np.all(np.isfinite(x)):
            raise DatasetError(f"{source}: {key} holds NaN or infinity")
        inputs[key] = x
    if inputs["x_test"].shape[1:] != inputs["x_train"].shape[1:]:
        raise DatasetError(
            f"{source}: x_test's rows have shape {inputs['x_test'].shape[1:]}, x_train's "
            f"{inputs['x_train'].shape[1:]}: they must match"
        )
    for key, y in labels.items():
        y = np.asarray(y)
        x_key = key.replace("y_", "x_")
        if y.ndim != 1 or len(y) != len(inputs[x_key]):
            raise DatasetError(
                f"{source}: {key} must be one label per row of {x_key} "
                f"({len(inputs[x_key])}), got shape {y.shape}"
            )
        whole = y.dtype.kind in "iu" or (
            y.dtype.kind == "f" and np.all(np.isfinite(y)) and np.all(y == np.round(y))
        )
        if not whole:
            raise DatasetError(f"{source}: {key} must be whole-number class labels, got {y.dtype}")
        if y.min() < 0:
            raise DatasetError(f"{source}: {key} has label {y.min()}; labels start at 0")
        if y.max() >= MAX_CLASSES:
            raise DatasetError(
                f"{source}: {key} has label {y.max()}; labels must be below {MAX_CLASSES} "
                "(a model has one output per class)"
            )
        labels[key] = y.astype(np.int64)
    classes = int(max(labels["y_train"].max(), labels["y_test"].max())) + 1
    if classes < 2:
        raise DatasetError(f"{source}: y_train and y_test hold one class only (label 0)")
    as_bytes = all(x.dtype == np.uint8 for x in inputs.values())
    converted = {key: _as_inputs(x, as_bytes) for key, x in inputs.items()}
    return Dataset(
        name=name,
        x_train=converted["x_train"],
        y_train=labels["y_train"],
        x_test=converted["x_test"],
        y_test=labels["y_test"],
        input_shape=tuple(converted["x_train"].shape[1:]),
        num_classes=classes,
        input_scale=_MAX_PIXEL if as_bytes else 1.0,
    )


def _as_inputs(x: np.ndarray, as_bytes: bool) -> np.ndarray:
    """Inputs as stored: uint8 images as bytes when both splits are bytes (read as
    byte / 255), else float64 as the engine computes on: uint8 images scaled into [0, 1],
    other numbers as given."""
    if as_bytes:
        return np.ascontiguousarray(x)
    if x.dtype == np.uint8:
        return np.ascontiguousarray(x / _MAX_PIXEL)
    return np.ascontiguousarray(x, dtype=np.float64)
