"""MNIST and Fashion-MNIST from a local directory of IDX files (plain or gzip-compressed).

IDX layout: two zero bytes, a dtype code, the number of dimensions, then one big-endian uint32
size per dimension, then the data in row-major order, big-endian.
"""

from __future__ import annotations

import gzip
import io
import math
import zlib
from pathlib import Path
from typing import BinaryIO

import numpy as np

from workbench.data.dataset import Dataset, DatasetError
from workbench.safe_io.bounded_read import (
    FileRefused,
    check_memory,
    file_size,
    open_regular,
    read_into,
)

# IDX dtype codes -> big-endian NumPy dtypes.
IDX_DTYPES: dict[int, np.dtype] = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}

IDX_FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}

_NUM_CLASSES = 10  # MNIST and Fashion-MNIST both have ten classes
_MAX_PIXEL = 255.0
_GZIP_MAGIC = b"\x1f\x8b"


def find_file(directory: Path, name: str) -> Path:
    """Return ``directory/name``, else ``directory/name.gz``; the plain file wins if both exist.

    Whatever sits at the name is returned (a FIFO or a directory too): reading it refuses
    what is not a regular file, naming what it is.

    Raises
    ------
    DatasetError
        Naming the full paths tried, if the directory or both files are missing.

    Examples
    --------
    >>> import tempfile
    >>> directory = Path(tempfile.mkdtemp())
    >>> _ = (directory / "a.gz").write_bytes(b"")
    >>> find_file(directory, "a").name
    'a.gz'
    """
    if not directory.is_dir():
        raise DatasetError(f"dataset directory {directory.resolve()} does not exist")
    for candidate in (directory / name, directory / f"{name}.gz"):
        if candidate.exists():
            return candidate
    raise DatasetError(
        f"dataset file {(directory / name).resolve()} (or {name}.gz next to it) does not exist"
    )


def parse_idx(data: bytes, source: str = "<bytes>") -> np.ndarray:
    """Parse the bytes of one IDX file into an array of its native shape and dtype.

    Parameters
    ----------
    data : bytes
        The whole (decompressed) file.
    source : str
        The file name to put in error messages.

    Returns
    -------
    numpy.ndarray
        Shape taken from the header, native byte order.

    Raises
    ------
    DatasetError
        On a bad magic number, unknown dtype code, truncated header, or a data length that does
        not match the header; the message names ``source``.

    Examples
    --------
    >>> header = bytes([0, 0, 0x08, 2]) + (2).to_bytes(4, "big") + (3).to_bytes(4, "big")
    >>> parse_idx(header + bytes(range(6))).tolist()
    [[0, 1, 2], [3, 4, 5]]
    """
    return _read_idx_stream(io.BytesIO(data), source, len(data))


def read_idx(path: Path, ndim: int | None = None) -> np.ndarray:
    """Read one IDX file (plain or gzip-compressed, whatever its name says), optionally
    requiring a number of dimensions.

    The file must be a regular file. Its header is read first; the data it declares must fit
    the memory budget (and, uncompressed, match the file's size) before the array is
    allocated, and a compressed file is inflated only up to that size, so a gzip bomb costs no
    more than the array its header declares.

    Examples
    --------
    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "labels.gz"
    >>> header = bytes([0, 0, 0x08, 1]) + (3).to_bytes(4, "big")
    >>> _ = path.write_bytes(gzip.compress(header + bytes([7, 8, 9])))
    >>> read_idx(path, ndim=1).tolist()
    [7, 8, 9]
    """
    try:
        with open_regular(path) as handle:
            # Gzip is detected by its magic bytes, not the suffix: IDX files start with zero
            # bytes, so the two can never be confused.
            compressed = handle.read(len(_GZIP_MAGIC)) == _GZIP_MAGIC
            handle.seek(0)
            if compressed:
                with gzip.GzipFile(fileobj=handle, mode="rb") as stream:
                    array = _read_idx_stream(stream, str(path), None)
            else:
                array = _read_idx_stream(handle, str(path), file_size(handle))
    except FileRefused as error:
        raise DatasetError(f"cannot read dataset file {error}") from None
    except (OSError, EOFError, zlib.error) as error:  # gzip.BadGzipFile is an OSError
        raise DatasetError(f"cannot read dataset file {path}: {error}") from None
    if ndim is not None and array.ndim != ndim:
        raise DatasetError(
            f"IDX file {path} has {array.ndim} dimensions {array.shape}, expected {ndim}"
        )
    return array


def _read_idx_stream(stream: BinaryIO, source: str, size: int | None) -> np.ndarray:
    """The array in an IDX stream (``size``: its length when known, None for a compressed
    one), checked against the header before anything the header declares is allocated."""
    head = stream.read(4)
    if len(head) < 4:
        raise DatasetError(f"IDX file {source} is truncated: {len(head)} bytes, no header")
    zero0, zero1, code, ndim = head
    if zero0 != 0 or zero1 != 0:
        raise DatasetError(
            f"IDX file {source} has a bad magic number 0x{head.hex()} "
            "(must start with two zero bytes; is it still compressed?)"
        )
    if code not in IDX_DTYPES:
        raise DatasetError(f"IDX file {source} has an unknown dtype code 0x{code:02x}")
    sizes = stream.read(4 * ndim)
    header_size = 4 + 4 * ndim
    if len(sizes) < 4 * ndim:
        raise DatasetError(
            f"IDX file {source} is truncated: header declares {ndim} dimensions "
            f"but the file has only {4 + len(sizes)} bytes"
        )
    shape = tuple(int(n) for n in np.frombuffer(sizes, dtype=">u4"))
    dtype = IDX_DTYPES[code]
    data_size = math.prod(shape) * dtype.itemsize
    expected = header_size + data_size
    if size is not None and size != expected:
        problem = "truncated" if size < expected else "longer than its header says"
        raise DatasetError(
            f"IDX file {source} is {problem}: header shape {shape} of {dtype.name} needs "
            f"{expected} bytes, file has {size}"
        )
    try:
        check_memory(source, data_size, f"header shape {shape} of {dtype.name}")
        array = np.empty(math.prod(shape), dtype=dtype)
        read_into(source, stream, array, f"header shape {shape} of {dtype.name}")
    except FileRefused as error:
        raise DatasetError(f"IDX file {error}") from None
    if stream.read(1):
        raise DatasetError(
            f"IDX file {source} is longer than its header says: header shape {shape} of "
            f"{dtype.name} needs {expected} bytes"
        )
    if dtype.byteorder == ">" and dtype.itemsize > 1:  # in place: no second copy
        array = array.byteswap(inplace=True).view(dtype.newbyteorder("="))
    return array.reshape(shape)


def _load_split(
    directory: Path, images_name: str, labels_name: str
) -> tuple[np.ndarray, np.ndarray, Path]:
    images_path = find_file(directory, images_name)
    labels_path = find_file(directory, labels_name)
    images = read_idx(images_path, ndim=3)
    labels = read_idx(labels_path, ndim=1)
    if images.dtype != np.uint8 or labels.dtype != np.uint8:
        raise DatasetError(
            f"IDX files {images_path} and {labels_path} must hold unsigned bytes, "
            f"got {images.dtype} and {labels.dtype}"
        )
    if len(labels) != len(images):
        raise DatasetError(
            f"IDX label file {labels_path} has {len(labels)} labels but image file "
            f"{images_path} has {len(images)} images"
        )
    if len(labels) == 0:
        raise DatasetError(f"IDX label file {labels_path} holds no samples")
    if labels.max() >= _NUM_CLASSES:
        raise DatasetError(
            f"IDX label file {labels_path} has label {int(labels.max())}, "
            f"outside the range 0..{_NUM_CLASSES - 1}"
        )
    x = np.ascontiguousarray(images[:, np.newaxis, :, :])  # bytes, read as byte / 255
    return x, labels.astype(np.int64), images_path


def load_idx_dataset(directory: str | Path, name: str = "mnist") -> Dataset:
    """Load MNIST or Fashion-MNIST from the four standard IDX files in ``directory``.

    Each file may be plain or gzip-compressed (``.gz``). Images become ``(1, height, width)``,
    with height and width read from the IDX header, kept as bytes (the model reads
    ``byte / 255`` in ``[0, 1]``).

    Parameters
    ----------
    directory : str or Path
        Holds ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``,
        ``t10k-images-idx3-ubyte`` and ``t10k-labels-idx1-ubyte`` (each optionally ``.gz``).
    name : str
        ``"mnist"`` or ``"fashion-mnist"``; the format is the same.

    Raises
    ------
    DatasetError
        If a file is missing or malformed; the message names the file.

    Examples
    --------
    >>> import tempfile
    >>> directory = Path(tempfile.mkdtemp())
    >>> def write(name, ndim_sizes, payload):
    ...     header = bytes([0, 0, 0x08, len(ndim_sizes)])
    ...     header += b"".join(s.to_bytes(4, "big") for s in ndim_sizes)
    ...     _ = (directory / name).write_bytes(header + payload)
    >>> for prefix in ("train", "t10k"):
    ...     write(f"{prefix}-images-idx3-ubyte", (2, 3, 3), bytes(18))
    ...     write(f"{prefix}-labels-idx1-ubyte", (2,), bytes([3, 7]))
    >>> load_idx_dataset(directory).x_train.shape
    (2, 1, 3, 3)
    """
    directory = Path(directory).expanduser()
    x_train, y_train, train_path = _load_split(
        directory, IDX_FILES["train_images"], IDX_FILES["train_labels"]
    )
    x_test, y_test, test_path = _load_split(
        directory, IDX_FILES["test_images"], IDX_FILES["test_labels"]
    )
    if x_train.shape[1:] != x_test.shape[1:]:
        raise DatasetError(
            f"IDX image files {train_path} and {test_path} have different image sizes "
            f"{x_train.shape[2:]} and {x_test.shape[2:]}"
        )
    return Dataset(
        name=name,
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
        input_shape=x_train.shape[1:],
        num_classes=_NUM_CLASSES,
        input_scale=_MAX_PIXEL,
    )
