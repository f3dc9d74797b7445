"""Reading ``.npz`` archives (a zip of ``.npy`` arrays) a user named, allocating nothing before
it is checked (docs/security/files.md).

``numpy.load`` trusts each array's header: a header of a few bytes declaring 10^12 elements
makes it allocate them. Here each header is read first, its dtype must be a number type (never
an object array: reading one would unpickle), the bytes it declares must be exactly the bytes
its entry holds, and all the archive's arrays together must fit the memory budget; only then
is an array allocated, and it is filled by reading no more than it holds (a compressed entry
longer than declared is never inflated past that). Every refusal is a
:class:`~workbench.safe_io.bounded_read.FileRefused` naming the archive and the array.
"""

from __future__ import annotations

import math
import os
import zipfile
import zlib
from collections.abc import Mapping
from typing import BinaryIO

import numpy as np

from workbench.safe_io.bounded_read import (
    FileRefused,
    check_memory,
    format_bytes,
    read_into,
)

NPY_SUFFIX = ".npy"
NUMBER_KINDS = frozenset("biufc")  # bool, signed, unsigned, float, complex
_NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGIC = b"PK"
# What a malformed archive makes zipfile, zlib or numpy's header parser raise (RuntimeError:
# an encrypted entry; NotImplementedError: an unknown compression method).
_MALFORMED = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    zlib.error,
    EOFError,
    OSError,
    ValueError,
    OverflowError,
    RuntimeError,
    NotImplementedError,
)


def open_npz(path: str, handle: BinaryIO) -> zipfile.ZipFile:
    """The zip archive in the open file ``handle``; an empty file, a single ``.npy`` array
    or anything else that is not a zip is refused, naming ``path``."""
    size = handle.seek(0, os.SEEK_END)
    handle.seek(0)
    if size == 0:
        raise FileRefused(path, "is empty, not an .npz archive of arrays")
    start = handle.read(len(_NPY_MAGIC))
    handle.seek(0)
    if start == _NPY_MAGIC:
        raise FileRefused(
            path,
            "is a single .npy array, not an .npz archive of named arrays (write one with "
            "numpy.savez)",
        )
    try:
        if not start.startswith(_ZIP_MAGIC):
            raise zipfile.BadZipFile(f"it starts with {start[:4]!r}, not a zip header")
        return zipfile.ZipFile(handle)
    except _MALFORMED as error:
        raise FileRefused(path, f"is not an .npz archive of arrays ({error})") from None
    except MemoryError:
        raise FileRefused(path, "is not an .npz archive (its zip directory is too large)") from None


def npz_entries(path: str, archive: zipfile.ZipFile) -> dict[str, zipfile.ZipInfo]:
    """The archive's arrays by name (the entry name without ``.npy``), in archive order;
    an entry that is not an ``.npy`` array, or a name that appears twice, is refused."""
    entries: dict[str, zipfile.ZipInfo] = {}
    for info in archive.infolist():
        if info.is_dir() or not info.filename.endswith(NPY_SUFFIX):
            raise FileRefused(path, f"entry {info.filename!r} is not an .npy array")
        name = info.filename[: -len(NPY_SUFFIX)]
        if name in entries:
            raise FileRefused(path, f"array {name!r} appears twice")
        entries[name] = info
    return entries


def read_npz_arrays(
    path: str, archive: zipfile.ZipFile, entries: Mapping[str, zipfile.ZipInfo]
) -> dict[str, np.ndarray]:
    """The arrays of ``entries`` (from :func:`npz_entries`), writable, each checked before it
    is allocated and all together against the memory budget.

    Examples
    --------
    >>> import io
    >>> buffer = io.BytesIO()
    >>> np.savez(buffer, x=np.arange(3), y=np.ones((2, 2), np.float32))
    >>> archive = open_npz("mine.npz", buffer)
    >>> arrays = read_npz_arrays("mine.npz", archive, npz_entries("mine.npz", archive))
    >>> arrays["x"].tolist(), arrays["y"].shape
    ([0, 1, 2], (2, 2))
    """
    arrays: dict[str, np.ndarray] = {}
    total = 0
    for name, info in entries.items():
        try:
            with archive.open(info) as entry:
                shape, fortran, dtype = _read_header(path, name, entry)
                nbytes = math.prod(shape) * dtype.itemsize
                held = info.file_size - entry.tell()
                if nbytes != held:
                    raise FileRefused(
                        path,
                        f"array {name!r} declares shape {shape} of {dtype.name} "
                        f"({format_bytes(nbytes)}), but its entry holds {format_bytes(held)}",
                    )
                total += nbytes
                check_memory(path, total, f"its arrays up to {name!r}")
                flat = np.empty(math.prod(shape), dtype=dtype)
                read_into(path, entry, flat, f"array {name!r}")
        except FileRefused:
            raise
        except _MALFORMED as error:
            raise FileRefused(path, f"array {name!r} cannot be read ({error})") from None
        except MemoryError:
            raise FileRefused(
                path, f"array {name!r} does not fit in memory ({format_bytes(total)} in all)"
            ) from None
        arrays[name] = flat.reshape(shape, order="F" if fortran else "C")
    return arrays


def _read_header(path: str, name: str, entry: BinaryIO) -> tuple[tuple[int, ...], bool, np.dtype]:
    """The shape, order and dtype an ``.npy`` entry declares, refused unless they describe
    plain numbers."""
    version = np.lib.format.read_magic(entry)
    if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(entry)
    elif version == (2, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(entry)
    else:  # version 3 only adds UTF-8 field names, which only structured arrays have
        raise FileRefused(path, f"array {name!r} uses .npy format version {version}")
    if dtype.hasobject:
        raise FileRefused(
            path,
            f"array {name!r} holds Python objects, which only unpickling (allow_pickle) could "
            "read; refusing to load it",
        )
    if dtype.kind not in NUMBER_KINDS:
        raise FileRefused(
            path, f"{name} must be numbers (bool, integer, float, complex), got dtype {dtype}"
        )
    if any(size < 0 for size in shape):
        raise FileRefused(path, f"array {name!r} declares a negative size in shape {shape}")
    return tuple(shape), bool(fortran), dtype
