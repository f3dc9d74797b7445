"""The user's own NumPy arrays as a data set: ``model.fit(x=..., y=..., validation_data=...)``.

Such a data set has no file a worker could read: the client ships it to the cluster (once per
host, :mod:`workbench.runtime.host_dataset`). Its name, ``arrays:DIGEST``, is a hash of the
arrays' contents, so a run's record and a checkpoint's ``--resume`` check tell two sets of
arrays apart.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from workbench.data.dataset import Dataset, DatasetError
from workbench.data.npz import arrays_dataset

ARRAYS_KIND = "arrays"


def arrays_digest(*arrays: np.ndarray) -> str:
    """A short hash of the arrays' dtypes, shapes and bytes.

    Examples
    --------
    >>> arrays_digest(np.zeros(3)) == arrays_digest(np.zeros(3)), len(arrays_digest(np.ones(2)))
    (True, 16)
    """
    digest = hashlib.sha256()
    for array in arrays:
        array = np.ascontiguousarray(array)
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(memoryview(array).cast("B"))
    return digest.hexdigest()[:16]


def fit_arrays_dataset(x: Any, y: Any, validation_data: Any = None) -> Dataset:
    """The data set ``fit(x=x, y=y, validation_data=(x_val, y_val))`` trains on; without
    ``validation_data`` the last fifth of the rows is held out for testing (as for an npz file
    without a test split). Errors name the argument at fault.

    Examples
    --------
    >>> ds = fit_arrays_dataset(np.ones((10, 3)), np.arange(10) % 2)
    >>> ds.name.startswith("arrays:"), len(ds.y_train), len(ds.y_test)
    (True, 8, 2)
    """
    if x is None or y is None:
        raise DatasetError("fit: give both x= and y= (NumPy arrays), or neither")
    arrays = {"x_train": np.asarray(x), "y_train": np.asarray(y)}
    if validation_data is not None:
        if not isinstance(validation_data, tuple | list) or len(validation_data) != 2:
            raise DatasetError(
                "fit: validation_data must be a pair (x_val, y_val) of arrays, got "
                f"{type(validation_data).__name__}"
            )
        arrays["x_test"], arrays["y_test"] = (np.asarray(part) for part in validation_data)
    for name, array in arrays.items():
        if array.dtype == object:
            raise DatasetError(f"fit: {_argument(name)} must be a numeric array, got objects")
    name = f"{ARRAYS_KIND}:{arrays_digest(*arrays.values())}"
    try:
        return arrays_dataset(name, **arrays, source="fit")
    except DatasetError as error:
        # Name the arguments as the caller wrote them (x, y, validation_data).
        message = str(error)
        for key in ("x_train", "y_train", "x_test", "y_test"):
            message = message.replace(key, _argument(key))
        raise DatasetError(message) from None


def _argument(key: str) -> str:
    return {
        "x_train": "x",
        "y_train": "y",
        "x_test": "validation_data[0]",
        "y_test": "validation_data[1]",
    }[key]
