"""CIFAR-10 from a local directory of the official binary batches.

Each batch file is a sequence of 3073-byte records: one label byte, then a 3x32x32 image as
1024 red, 1024 green and 1024 blue bytes (row-major), which is already channels-first.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from workbench.data.dataset import Dataset, DatasetError

IMAGE_SHAPE = (3, 32, 32)
RECORD_BYTES = 1 + 3 * 32 * 32  # 3073
TRAIN_BATCHES = tuple(f"data_batch_{index}.bin" for index in range(1, 6))
TEST_BATCH = "test_batch.bin"
# The official tarball unpacks into this folder; accept the parent directory too.
ARCHIVE_FOLDER = "cifar-10-batches-bin"

_NUM_CLASSES = 10
_MAX_PIXEL = 255.0


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
        data = path.read_bytes()
    except OSError as error:
        raise DatasetError(f"cannot read CIFAR-10 batch file {path}: {error}") from error
    if len(data) == 0 or len(data) % RECORD_BYTES != 0:
        raise DatasetError(
            f"CIFAR-10 batch file {path} has {len(data)} bytes, which is not a positive "
            f"multiple of the {RECORD_BYTES}-byte record size (truncated or not a batch file?)"
        )
    records = np.frombuffer(data, dtype=np.uint8).reshape(-1, RECORD_BYTES)
    labels = records[:, 0]
    if labels.max() >= _NUM_CLASSES:
        raise DatasetError(
            f"CIFAR-10 batch file {path} has label {int(labels.max())}, "
            f"outside the range 0..{_NUM_CLASSES - 1}"
        )
    return records[:, 1:].reshape(-1, *IMAGE_SHAPE), labels


def _to_arrays(batches: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    images = np.concatenate([images for images, _ in batches])
    labels = np.concatenate([labels for _, labels in batches])
    return images / _MAX_PIXEL, labels.astype(np.int64)


def load_cifar10(directory: str | Path) -> Dataset:
    """Load CIFAR-10 from ``directory`` (or its ``cifar-10-batches-bin`` subfolder).

    Uses whichever of ``data_batch_1.bin`` .. ``data_batch_5.bin`` exist (at least one), in
    order, for training, and ``test_batch.bin`` for testing. Images are ``(3, 32, 32)`` in
    ``[0, 1]``.

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
    >>> ds.x_train.shape, ds.y_test.tolist()
    ((2, 3, 32, 32), [1, 1])
    """
    directory = Path(directory).expanduser()
    if not directory.is_dir():
        raise DatasetError(f"CIFAR-10 directory {directory.resolve()} does not exist")
    if not (directory / TEST_BATCH).exists() and (directory / ARCHIVE_FOLDER).is_dir():
        directory = directory / ARCHIVE_FOLDER
    train_paths = [directory / name for name in TRAIN_BATCHES if (directory / name).is_file()]
    if not train_paths:
        raise DatasetError(
            f"CIFAR-10 directory {directory.resolve()} has none of the training batches "
            f"{', '.join(TRAIN_BATCHES)}"
        )
    test_path = directory / TEST_BATCH
    if not test_path.is_file():
        raise DatasetError(f"CIFAR-10 test batch {test_path.resolve()} does not exist")
    x_train, y_train = _to_arrays([read_cifar10_batch(path) for path in train_paths])
    x_test, y_test = _to_arrays([read_cifar10_batch(test_path)])
    return Dataset(
        name="cifar10",
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
        input_shape=IMAGE_SHAPE,
        num_classes=_NUM_CLASSES,
    )
