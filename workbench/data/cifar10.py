"""CIFAR-10 from a local directory of the official batches: the binary version
(``cifar-10-batches-bin``) or the Python version (``cifar-10-batches-py``).

A binary batch file is a sequence of 3073-byte records: one label byte, then a 3x32x32 image
as 1024 red, 1024 green and 1024 blue bytes (row-major), which is already channels-first. A
Python batch is a pickled dictionary whose ``data`` is a uint8 array of 3072-byte rows in the
same order and whose ``labels`` is a list; it is read without running anything the file could
ask for (:mod:`workbench.data.safe_pickle`).

Images stay bytes (the model reads ``byte / 255``): CIFAR-10's 60,000 images take 184 MB, not
the 1.5 GB of float64. The batches are copied straight into one array, with at most one batch
file in memory besides it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from workbench.data.dataset import Dataset, DatasetError
from workbench.data.safe_pickle import load_arrays_pickle
from workbench.safe_io.bounded_read import (
    FileRefused,
    check_memory,
    file_size,
    open_regular,
    read_into,
)

IMAGE_SHAPE = (3, 32, 32)
IMAGE_BYTES = 3 * 32 * 32  # 3072
RECORD_BYTES = 1 + IMAGE_BYTES  # 3073
TRAIN_BATCHES = tuple(f"data_batch_{index}.bin" for index in range(1, 6))
TEST_BATCH = "test_batch.bin"
PYTHON_TRAIN_BATCHES = tuple(f"data_batch_{index}" for index in range(1, 6))
PYTHON_TEST_BATCH = "test_batch"
# The official tarballs unpack into these folders; accept their parent directory too.
ARCHIVE_FOLDER = "cifar-10-batches-bin"
PYTHON_ARCHIVE_FOLDER = "cifar-10-batches-py"

_NUM_CLASSES = 10
_MAX_PIXEL = 255.0


def _check_labels(labels: np.ndarray, path: Path) -> None:
    if len(labels) and labels.max() >= _NUM_CLASSES:
        raise DatasetError(
            f"CIFAR-10 batch file {path} has label {int(labels.max())}, "
            f"outside the range 0..{_NUM_CLASSES - 1}"
        )


def read_cifar10_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Read one binary batch file into ``(images uint8 (n, 3, 32, 32), labels uint8 (n,))``.

    Raises
    ------
    DatasetError
        Naming the file, if it cannot be read, is empty, is not a whole number of 3073-byte
        records, or holds a label outside 0..9.

    Examples
    --------
    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "data_batch_1.bin"
    >>> _ = path.write_bytes(bytes([4]) + bytes(3072))
    >>> images, labels = read_cifar10_batch(path)
    >>> images.shape, labels.tolist()
    ((1, 3, 32, 32), [4])
    """
    try:
        with open_regular(path) as handle:
            data = np.empty(_checked_size(path, file_size(handle)), dtype=np.uint8)
            read_into(path, handle, data, "the batch")
    except FileRefused as error:
        raise DatasetError(f"cannot read CIFAR-10 batch file {error}") from None
    except OSError as error:
        raise DatasetError(f"cannot read CIFAR-10 batch file {path}: {error}") from None
    records = data.reshape(-1, RECORD_BYTES)
    labels = records[:, 0]
    _check_labels(labels, path)
    return records[:, 1:].reshape(-1, *IMAGE_SHAPE), labels


def _checked_size(path: Path, size: int) -> int:
    """``size``, the bytes of a binary batch, if it is whole records that fit in memory."""
    if size == 0 or size % RECORD_BYTES != 0:
        raise DatasetError(
            f"CIFAR-10 batch file {path} has {size} bytes, which is not a positive "
            f"multiple of the {RECORD_BYTES}-byte record size (truncated or not a batch file?)"
        )
    check_memory(path, size, "the batch")
    return size


def read_cifar10_python_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Read one Python (pickled) batch into ``(images uint8 (n, 3, 32, 32), labels (n,))``.

    Raises
    ------
    DatasetError
        Naming the file, if it is not a pickled dictionary with a uint8 ``data`` array of
        3072-byte rows and one label in 0..9 per row, or asks for anything but arrays.

    Examples
    --------
    >>> import pickle, tempfile
    >>> path = Path(tempfile.mkdtemp()) / "data_batch_1"
    >>> batch = {b"data": np.zeros((2, 3072), np.uint8), b"labels": [3, 9]}
    >>> _ = path.write_bytes(pickle.dumps(batch, protocol=2))
    >>> images, labels = read_cifar10_python_batch(path)
    >>> images.shape, labels.tolist()
    ((2, 3, 32, 32), [3, 9])
    """
    batch = load_arrays_pickle(path)
    if not isinstance(batch, dict):
        raise DatasetError(f"CIFAR-10 batch file {path} holds a {type(batch).__name__}, not a dict")
    # Python 2's pickles keep byte-string keys; others pickle plain strings.
    found = {(k.decode("latin-1") if isinstance(k, bytes) else k): v for k, v in batch.items()}
    data, labels = found.get("data"), found.get("labels")
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2:
        raise DatasetError(f"CIFAR-10 batch file {path} has no uint8 'data' array of image rows")
    if data.shape[1] != IMAGE_BYTES:
        raise DatasetError(
            f"CIFAR-10 batch file {path}: 'data' rows hold {data.shape[1]} bytes, an image "
            f"takes {IMAGE_BYTES}"
        )
    try:
        labels = np.asarray(labels, dtype=np.int64)
    except (TypeError, ValueError, OverflowError):
        raise DatasetError(
            f"CIFAR-10 batch file {path}: 'labels' is not a list of whole numbers"
        ) from None
    if labels.shape != (len(data),):
        raise DatasetError(
            f"CIFAR-10 batch file {path} has {labels.size} labels for {len(data)} images"
        )
    if len(labels) and labels.min() < 0:
        raise DatasetError(f"CIFAR-10 batch file {path} has label {int(labels.min())}")
    _check_labels(labels, path)
    return data.reshape(-1, *IMAGE_SHAPE), labels


def _concatenated(
    paths: Sequence[Path],
    read: Callable[[Path], tuple[np.ndarray, np.ndarray]],
    records: Callable[[Path], int] | None,
) -> tuple[np.ndarray, np.ndarray]:
    """The batches' images and labels in file order, copied into arrays allocated once (sized
    from the files when ``records`` tells each file's count without reading it)."""
    if records is None:  # pickles: read each to learn its size
        parts = [read(path) for path in paths]
        return np.concatenate([i for i, _ in parts]), np.concatenate([lb for _, lb in parts])
    counts = [records(path) for path in paths]
    try:
        check_memory(paths[0].parent, sum(counts) * RECORD_BYTES, "its batches together")
    except FileRefused as error:
        raise DatasetError(f"CIFAR-10 directory {error}") from None
    images = np.empty((sum(counts), *IMAGE_SHAPE), dtype=np.uint8)
    labels = np.empty(sum(counts), dtype=np.int64)
    start = 0
    for path, count in zip(paths, counts, strict=True):
        batch_images, batch_labels = read(path)
        if len(batch_labels) != count:
            raise DatasetError(f"CIFAR-10 batch file {path} changed while it was being read")
        end = start + count
        images[start:end], labels[start:end] = batch_images, batch_labels
        start = end
    return images, labels


def _binary_records(path: Path) -> int:
    """The records in the binary batch ``path``, from its size (a malformed size fails here;
    a FIFO or a directory is refused without being read)."""
    try:
        with open_regular(path) as handle:
            return _checked_size(path, file_size(handle)) // RECORD_BYTES
    except FileRefused as error:
        raise DatasetError(f"cannot read CIFAR-10 batch file {error}") from None


def _layout(directory: Path) -> tuple[Path, tuple[str, ...], str, Callable, Callable | None]:
    """(folder, training file names, test file name, reader, record counter) of the version
    found in ``directory``: the binary one if its test batch is there, else the Python one."""
    binary = (TRAIN_BATCHES, TEST_BATCH, read_cifar10_batch, _binary_records)
    python = (PYTHON_TRAIN_BATCHES, PYTHON_TEST_BATCH, read_cifar10_python_batch, None)
    for folder in (directory, directory / ARCHIVE_FOLDER, directory / PYTHON_ARCHIVE_FOLDER):
        for version in (binary, python):
            if (folder / version[1]).exists():  # reading it refuses a non-regular file
                return (folder, *version)
    return (directory, *binary)  # neither test batch: name the binary one's in the error


def load_cifar10(directory: str | Path) -> Dataset:
    """Load CIFAR-10 from ``directory`` (or its ``cifar-10-batches-bin`` or
    ``cifar-10-batches-py`` subfolder).

    Uses whichever of ``data_batch_1.bin`` .. ``data_batch_5.bin`` (the Python version:
    ``data_batch_1`` .. ``data_batch_5``) exist (at least one), in order, for training, and
    ``test_batch.bin`` (``test_batch``) for testing. Images are ``(3, 32, 32)`` bytes, read by
    the model in ``[0, 1]``.

    Raises
    ------
    DatasetError
        If the directory, every training batch, or the test batch is missing, or a file is
        malformed; the message names the path.

    Examples
    --------
    >>> import tempfile
    >>> directory = Path(tempfile.mkdtemp())
    >>> for name in ("data_batch_1.bin", "test_batch.bin"):
    ...     _ = (directory / name).write_bytes((bytes([1]) + bytes(3072)) * 2)
    >>> ds = load_cifar10(directory)
    >>> ds.x_train.shape, ds.x_train.dtype, ds.y_test.tolist()
    ((2, 3, 32, 32), dtype('uint8'), [1, 1])
    """
    directory = Path(directory).expanduser()
    if not directory.is_dir():
        raise DatasetError(f"CIFAR-10 directory {directory.resolve()} does not exist")
    directory, train_names, test_name, read, records = _layout(directory)
    train_paths = [directory / name for name in train_names if (directory / name).exists()]
    if not train_paths:
        raise DatasetError(
            f"CIFAR-10 directory {directory.resolve()} has none of the training batches "
            f"{', '.join(train_names)}"
        )
    test_path = directory / test_name
    if not test_path.exists():
        raise DatasetError(f"CIFAR-10 test batch {test_path.resolve()} does not exist")
    x_train, y_train = _concatenated(train_paths, read, records)
    x_test, y_test = _concatenated([test_path], read, records)
    return Dataset(
        name="cifar10",
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
        input_shape=IMAGE_SHAPE,
        num_classes=_NUM_CLASSES,
        input_scale=_MAX_PIXEL,
    )
