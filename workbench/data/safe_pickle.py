"""Reading pickle files that data sets ship in (CIFAR-10's Python batches) without running
what a pickle may ask for.

A pickle is a program: loading one from an untrusted file can call any importable function.
The reader here resolves only the few names a pickled dictionary of NumPy arrays needs (how
NumPy 1 and NumPy 2 rebuild an array and its dtype, and how Python 3 pickles bytes at protocol
2); any other name in the file is refused, naming the file and the name, before it is called.
"""

from __future__ import annotations

import _codecs
import io
import pickle
from pathlib import Path
from typing import Any

import numpy as np

from workbench.data.dataset import DatasetError

_RECONSTRUCT = np.ndarray.__reduce__(np.zeros(0))[0]  # numpy's _reconstruct, whatever its home
_ALLOWED: dict[tuple[str, str], Any] = {
    ("numpy.core.multiarray", "_reconstruct"): _RECONSTRUCT,  # written by NumPy 1
    ("numpy._core.multiarray", "_reconstruct"): _RECONSTRUCT,  # written by NumPy 2
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("_codecs", "encode"): _codecs.encode,  # bytes, as Python 3 pickles them at protocol 2
}


class _ArraysOnly(pickle.Unpickler):
    def __init__(self, file: io.BufferedIOBase, source: str) -> None:
        # encoding="bytes": batches written by Python 2 keep their byte-string keys.
        super().__init__(file, encoding="bytes")
        self.source = source

    def find_class(self, module: str, name: str) -> Any:
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise DatasetError(
                f"pickle file {self.source} asks for {module}.{name}, which a data set never "
                "needs; refusing to load it (only NumPy arrays, numbers, strings, lists and "
                "dictionaries are read)"
            ) from None


def load_arrays_pickle(path: Path) -> Any:
    """The object pickled in ``path``, if it is made of NumPy arrays, numbers, strings, bytes,
    lists and dictionaries only.

    Raises
    ------
    DatasetError
        Naming the file, if it cannot be read, is not a pickle, or asks for anything else.

    Examples
    --------
    >>> import pickle, tempfile
    >>> path = Path(tempfile.mkdtemp()) / "batch"
    >>> _ = path.write_bytes(pickle.dumps({b"data": np.arange(3, dtype=np.uint8)}, protocol=2))
    >>> load_arrays_pickle(path)[b"data"].tolist()
    [0, 1, 2]
    """
    try:
        with open(path, "rb") as file:
            return _ArraysOnly(file, str(path)).load()
    except DatasetError:
        raise
    except OSError as error:
        raise DatasetError(f"cannot read pickle file {path}: {error}") from None
    except Exception as error:  # truncated or not a pickle: whatever pickle raises then
        raise DatasetError(f"pickle file {path} is not a readable pickle: {error}") from None
