"""CIFAR-10 binary batches: record layout, batch selection, and named errors."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from workbench.data import DatasetError, load_dataset
from workbench.data.cifar10 import ARCHIVE_FOLDER, RECORD_BYTES, TEST_BATCH

MakeCifarDir = Callable[..., tuple[Path, dict]]  # see conftest.make_cifar_dir


def test_loads_shapes_dtypes_and_exact_values(make_cifar_dir: MakeCifarDir) -> None:
    directory, written = make_cifar_dir(train_batches=(1, 2), records=4)
    ds = load_dataset(f"cifar10:{directory}")
    assert ds.name == "cifar10"
    assert ds.input_shape == (3, 32, 32)
    assert ds.num_classes == 10
    assert ds.x_train.shape == (8, 3, 32, 32)
    assert ds.x_test.shape == (4, 3, 32, 32)
    assert ds.x_train.dtype == ds.x_test.dtype == np.float64
    assert ds.y_train.dtype == ds.y_test.dtype == np.int64
    assert ds.x_train.min() == 0.0 and ds.x_train.max() == 1.0
    # Training batches are concatenated in file order.
    images_1, labels_1 = written["data_batch_1.bin"]
    images_2, labels_2 = written["data_batch_2.bin"]
    np.testing.assert_array_equal(ds.x_train, np.concatenate([images_1, images_2]) / 255.0)
    np.testing.assert_array_equal(ds.y_train, np.concatenate([labels_1, labels_2]))
    np.testing.assert_array_equal(ds.y_test, written[TEST_BATCH][1])


def test_record_layout_is_label_then_red_green_blue_planes(tmp_path: Path) -> None:
    record = np.zeros(RECORD_BYTES, dtype=np.uint8)
    record[0] = 7
    record[1 + 0 * 1024 + 2 * 32 + 5] = 255  # red, row 2, column 5
    record[1 + 2 * 1024 + 31 * 32 + 0] = 51  # blue, row 31, column 0
    for name in ("data_batch_1.bin", TEST_BATCH):
        (tmp_path / name).write_bytes(record.tobytes())
    ds = load_dataset(f"cifar10:{tmp_path}")
    assert ds.y_train.tolist() == [7]
    assert ds.x_train[0, 0, 2, 5] == 1.0
    assert ds.x_train[0, 2, 31, 0] == 0.2
    assert np.count_nonzero(ds.x_train) == 2


def test_accepts_whichever_training_batches_exist(make_cifar_dir: MakeCifarDir) -> None:
    directory, written = make_cifar_dir(train_batches=(3, 5), records=2)
    ds = load_dataset(f"cifar10:{directory}")
    expected = np.concatenate([written["data_batch_3.bin"][1], written["data_batch_5.bin"][1]])
    np.testing.assert_array_equal(ds.y_train, expected)


def test_accepts_the_unpacked_archive_folder(make_cifar_dir: MakeCifarDir) -> None:
    directory, _ = make_cifar_dir(f"parent/{ARCHIVE_FOLDER}", train_batches=(1,), records=2)
    ds = load_dataset(f"cifar10:{directory.parent}")
    assert ds.x_train.shape == (2, 3, 32, 32)


def test_no_training_batch_lists_the_expected_names(make_cifar_dir: MakeCifarDir) -> None:
    directory, _ = make_cifar_dir(train_batches=(), records=2)
    with pytest.raises(DatasetError) as raised:
        load_dataset(f"cifar10:{directory}")
    assert str(directory.resolve()) in str(raised.value)
    assert "data_batch_1.bin" in str(raised.value)


def test_missing_test_batch_names_the_full_path(make_cifar_dir: MakeCifarDir) -> None:
    directory, _ = make_cifar_dir(records=2)
    (directory / TEST_BATCH).unlink()
    with pytest.raises(DatasetError) as raised:
        load_dataset(f"cifar10:{directory}")
    assert str((directory / TEST_BATCH).resolve()) in str(raised.value)


def test_missing_directory_names_the_full_path(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="nowhere"):
        load_dataset(f"cifar10:{tmp_path / 'nowhere'}")


@pytest.mark.parametrize(
    ("name", "change", "words"),
    [
        ("data_batch_2.bin", lambda data: data[:-1], "multiple of the 3073-byte"),
        ("data_batch_1.bin", lambda data: data + b"\x00", "multiple of the 3073-byte"),
        (TEST_BATCH, lambda data: b"", "0 bytes"),
        ("data_batch_1.bin", lambda data: b"\x0a" + data[1:], "label 10"),
        (TEST_BATCH, lambda data: data[:RECORD_BYTES] + b"\xff" + data[RECORD_BYTES + 1 :], "255"),
    ],
    ids=["truncated", "trailing byte", "empty", "label 10", "label 255"],
)
def test_malformed_batch_raises_naming_the_file(
    make_cifar_dir: MakeCifarDir, name: str, change: Callable[[bytes], bytes], words: str
) -> None:
    directory, _ = make_cifar_dir(records=3)
    path = directory / name
    path.write_bytes(change(path.read_bytes()))
    with pytest.raises(DatasetError) as raised:
        load_dataset(f"cifar10:{directory}")
    assert name in str(raised.value)
    assert words in str(raised.value)
