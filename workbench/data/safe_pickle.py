"""Reading pickle files that data sets ship in (CIFAR-10's Python batches) without running
what a pickle may ask for, and without letting a small file take the reader's time or memory.

A pickle is a program: loading one from an untrusted file can call any importable function.
The reader here resolves only the names a pickled dictionary of NumPy arrays needs (how NumPy 1
and NumPy 2 rebuild an array and its dtype, and how Python 3 pickles bytes at protocol 2); any
other name in the file is refused, naming the file and the name, before it is called. Even
those names never reach NumPy during the load: an array and its dtype are kept as inert parts
(a dtype's pickled state can otherwise turn plain bytes into object pointers) and built here
afterwards, only from a number dtype, a shape and exactly the bytes that shape needs.

The file must be a regular file no larger than the memory budget. What it unpickles to is
then walked once, rebuilding it: at most ``MAX_DEPTH`` containers deep and ``MAX_ITEMS``
values in all, counting a shared reference every time it is reached (a few kilobytes of
nested shared references, a "billion laughs", would otherwise expand to more values than any
reader could walk). Limits are in docs/security/files.md, "Sizes are checked before anything is
allocated".
"""

from __future__ import annotations

import io
import math
import pickle
from pathlib import Path
from typing import Any

import numpy as np

from workbench.data.dataset import DatasetError
from workbench.safe_io.bounded_read import FileRefused, check_memory, file_size, open_regular

MAX_DEPTH = 32  # containers within containers; a data set's batch needs three
MAX_ITEMS = 1 << 20  # values reached walking the object, shared ones counted each time
_NUMBER_KINDS = frozenset("biufc")
_PLAIN_DTYPE_STATE = (None, None, None, -1, -1, 0)  # a number dtype's pickled state after
# its version and byte order: no fields, no subarray, no flags


class _Refused(Exception):
    """Why the pickle is refused; :func:`load_arrays_pickle` adds the file name."""


class _ArrayType:
    """What ``numpy.ndarray`` resolves to: only a marker for ``_reconstruct``."""


class _ArrayParts:
    """A pickled array until it is checked: ``_reconstruct`` makes one, BUILD gives it its
    state ``(version, shape, dtype, fortran, data)``."""

    __slots__ = ("state",)

    def __init__(self) -> None:
        self.state: Any = None

    def __setstate__(self, state: Any) -> None:
        self.state = state


class _DtypeParts:
    """A pickled dtype until it is checked: ``numpy.dtype(spec, align, copy)`` then BUILD
    with its state."""

    __slots__ = ("spec", "state")

    def __init__(self, spec: Any, align: Any = False, copy: Any = False) -> None:
        self.spec, self.state = spec, None

    def __setstate__(self, state: Any) -> None:
        self.state = state


def _reconstruct(subtype: Any, shape: Any, code: Any) -> _ArrayParts:
    if subtype is not _ArrayType:
        raise _Refused("it rebuilds an array of a type other than numpy.ndarray")
    return _ArrayParts()


def _encode(text: Any, encoding: Any = "utf-8") -> bytes:
    # Python 3 pickles bytes at protocol 2 as _codecs.encode(latin-1 text, "latin1"); no
    # other codec (some compress, some import modules) is let through.
    if not isinstance(text, str) or encoding not in ("latin1", "latin-1"):
        raise _Refused(f"it asks _codecs.encode for {encoding!r}, not for bytes in latin1")
    return text.encode("latin-1")


_ALLOWED: dict[tuple[str, str], Any] = {
    ("numpy.core.multiarray", "_reconstruct"): _reconstruct,  # written by NumPy 1
    ("numpy._core.multiarray", "_reconstruct"): _reconstruct,  # written by NumPy 2
    ("numpy", "ndarray"): _ArrayType,
    ("numpy", "dtype"): _DtypeParts,
    ("_codecs", "encode"): _encode,
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
    """The object pickled in ``path``, if it is made of NumPy number arrays, numbers,
    strings, bytes, lists and dictionaries only, within the limits above.

    Raises
    ------
    DatasetError
        Naming the file, if it is not a regular file, does not fit the memory budget, cannot
        be read, is not a pickle, asks for anything else, or exceeds a limit.

    Examples
    --------
    >>> import pickle, tempfile
    >>> path = Path(tempfile.mkdtemp()) / "batch"
    >>> _ = path.write_bytes(pickle.dumps({b"data": np.arange(3, dtype=np.uint8)}, protocol=2))
    >>> load_arrays_pickle(path)[b"data"].tolist()
    [0, 1, 2]
    """
    try:
        with open_regular(path) as handle:
            check_memory(path, file_size(handle), "the pickle")
            data = handle.read()
        loaded = _ArraysOnly(io.BytesIO(data), str(path)).load()
        return _Rebuild().value(loaded, 0)
    except DatasetError:
        raise
    except FileRefused as error:
        raise DatasetError(f"cannot read pickle file {error}") from None
    except _Refused as error:
        raise DatasetError(f"pickle file {path} is refused: {error}") from None
    except MemoryError:
        raise DatasetError(f"pickle file {path} does not fit in memory") from None
    except Exception as error:  # truncated or not a pickle: whatever pickle raises then
        raise DatasetError(f"pickle file {path} is not a readable pickle: {error}") from None


class _Rebuild:
    """One walk of an unpickled object: a copy with every array part built and checked,
    refused past ``MAX_DEPTH`` or ``MAX_ITEMS``."""

    def __init__(self) -> None:
        self.items = 0

    def value(self, value: Any, depth: int) -> Any:
        self.items += 1
        if self.items > MAX_ITEMS:
            raise _Refused(
                f"it holds more than {MAX_ITEMS} values (counting shared references each time "
                "they are reached)"
            )
        if isinstance(value, _ArrayParts):
            return _array(value.state)
        if isinstance(value, _DtypeParts):
            return _dtype(value)
        if not isinstance(value, dict | list | tuple | set | frozenset):
            return value  # a number, a string, bytes or None: nothing else unpickles here
        if depth >= MAX_DEPTH:
            raise _Refused(f"its containers nest more than {MAX_DEPTH} deep")
        if isinstance(value, dict):
            return {
                self.value(key, depth + 1): self.value(item, depth + 1)
                for key, item in value.items()
            }
        items = [self.value(item, depth + 1) for item in value]
        return items if isinstance(value, list) else type(value)(items)


def _text(value: Any) -> Any:
    return value.decode("latin-1") if isinstance(value, bytes) else value


def _dtype(parts: _DtypeParts) -> np.dtype:
    """A plain number dtype (any byte order) from its pickled spec and state, else refused."""
    spec, state = _text(parts.spec), parts.state
    if not isinstance(spec, str) or not isinstance(state, tuple) or len(state) != 8:
        raise _Refused(f"it holds a malformed NumPy dtype {spec!r}")
    order = _text(state[1])
    if tuple(state[2:]) != _PLAIN_DTYPE_STATE or order not in ("<", ">", "|", "="):
        raise _Refused(f"its NumPy dtype {spec!r} has fields, flags or a layout of its own")
    try:
        dtype = np.dtype(spec)
    except TypeError:
        raise _Refused(f"it holds an unknown NumPy dtype {spec!r}") from None
    if dtype.kind not in _NUMBER_KINDS or dtype.fields is not None or dtype.subdtype:
        raise _Refused(f"its NumPy dtype {spec!r} is not a number type")
    return dtype.newbyteorder(order) if order in "<>" else dtype


def _array(state: Any) -> np.ndarray:
    """A read-only array over the pickled bytes, after checking that they are exactly what
    the pickled shape and dtype need."""
    if not (isinstance(state, tuple) and len(state) == 5 and isinstance(state[2], _DtypeParts)):
        raise _Refused("it holds a malformed NumPy array")
    _, shape, dtype_parts, fortran, data = state
    dtype = _dtype(dtype_parts)
    if not (
        isinstance(shape, tuple)
        and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape)
        and isinstance(data, bytes)
    ):
        raise _Refused("it holds a NumPy array without a shape and its bytes")
    needed = math.prod(shape) * dtype.itemsize
    if needed != len(data):
        raise _Refused(
            f"it holds a NumPy array of shape {shape} and {dtype.name} ({needed} bytes) "
            f"with {len(data)} bytes of data"
        )
    return np.frombuffer(data, dtype=dtype).reshape(shape, order="F" if fortran else "C")
