"""CIFAR-10's binary and Python batches: record layout, batch selection, stored bytes, and
named errors (an unsafe pickle included)."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from workbench.data import DatasetError, load_dataset
from workbench.data.cifar10 import (
    ARCHIVE_FOLDER,
    PYTHON_ARCHIVE_FOLDER,
    RECORD_BYTES,
    TEST_BATCH,
)

MakeCifarDir = Callable[..., tuple[Path, dict]]  # see conftest.make_cifar_dir


def test_loads_shapes_dtypes_and_exact_values(make_cifar_dir: MakeCifarDir) -> None:
    directory, written = make_cifar_dir(train_batches=(1, 2), records=4)
    ds = load_dataset(f"cifar10:{directory}")
    assert ds.name == "cifar10"
    assert ds.input_shape == (3, 32, 32)
    assert ds.num_classes == 10
    assert ds.x_train.shape == (8, 3, 32, 32)
    assert ds.x_test.shape == (4, 3, 32, 32)
    assert ds.x_train.dtype == ds.x_test.dtype == np.uint8  # bytes, as the files hold them
    assert ds.y_train.dtype == ds.y_test.dtype == np.int64
    inputs = ds.model_inputs("train", "float64")[:]
    assert inputs.min() == 0.0 and inputs.max() == 1.0
    # Training batches are concatenated in file order.
    images_1, labels_1 = written["data_batch_1.bin"]
    images_2, labels_2 = written["data_batch_2.bin"]
    np.testing.assert_array_equal(inputs, np.concatenate([images_1, images_2]) / 255.0)
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
    assert ds.x_train[0, 0, 2, 5] == 255
    assert ds.model_inputs("train", "float64")[0][2, 31, 0] == 0.2
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


def _write_python_batches(directory: Path, batches: dict[str, tuple[np.ndarray, list]]) -> None:
    """CIFAR-10's Python version, as its archive holds it: pickled dictionaries with
    byte-string keys, a uint8 ``data`` array of 3072-byte rows and a ``labels`` list."""
    directory.mkdir(parents=True)
    for name, (images, labels) in batches.items():
        batch = {
            b"batch_label": name.encode(),
            b"labels": labels,
            b"data": images.reshape(len(images), -1),
            b"filenames": [f"{i}.png".encode() for i in range(len(images))],
        }
        (directory / name).write_bytes(pickle.dumps(batch, protocol=2))


def test_the_python_version_loads_the_same_images(tmp_path: Path) -> None:
    generator = np.random.default_rng(1)
    images = generator.integers(0, 256, (7, 3, 32, 32), dtype=np.uint8)
    labels = generator.integers(0, 10, 7).tolist()
    parent = tmp_path / "download"
    _write_python_batches(
        parent / PYTHON_ARCHIVE_FOLDER,
        {
            "data_batch_1": (images[:3], labels[:3]),
            "data_batch_2": (images[3:5], labels[3:5]),
            "test_batch": (images[5:], labels[5:]),
        },
    )
    ds = load_dataset(f"cifar10:{parent}")  # the parent of the unpacked folder
    np.testing.assert_array_equal(ds.x_train, images[:5])
    np.testing.assert_array_equal(ds.x_test, images[5:])
    assert ds.y_train.tolist() == labels[:5] and ds.y_test.tolist() == labels[5:]
    assert ds.x_train.dtype == np.uint8 and ds.input_scale == 255.0
    # The same images as binary records give the same data set.
    binary = tmp_path / "binary"
    binary.mkdir()
    for name, rows in (("data_batch_1.bin", slice(0, 5)), (TEST_BATCH, slice(5, 7))):
        records = np.concatenate(
            [np.array(labels[rows], np.uint8)[:, None], images[rows].reshape(-1, 3072)], axis=1
        )
        (binary / name).write_bytes(records.tobytes())
    same = load_dataset(f"cifar10:{binary}")
    np.testing.assert_array_equal(same.x_train, ds.x_train)
    np.testing.assert_array_equal(same.y_train, ds.y_train)


class _RunsCode:
    def __reduce__(self):
        return (print, ("a pickle ran code",))


@pytest.mark.parametrize(
    ("batch", "words"),
    [
        ({b"data": np.zeros((2, 3072), np.uint8), b"labels": [1]}, "1 labels for 2 images"),
        ({b"data": np.zeros((2, 100), np.uint8), b"labels": [1, 2]}, "rows hold 100 bytes"),
        ({b"data": np.zeros((1, 3072)), b"labels": [1]}, "no uint8 'data' array"),
        ({b"data": np.zeros((1, 3072), np.uint8), b"labels": [10]}, "label 10"),
        ({b"data": np.zeros((1, 3072), np.uint8), b"labels": _RunsCode()}, ".print, which"),
        ([1, 2], "holds a list, not a dict"),
    ],
    ids=["label count", "row size", "float data", "label 10", "code in the pickle", "not a dict"],
)
def test_a_malformed_or_unsafe_python_batch_is_refused_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture, batch: object, words: str
) -> None:
    good = {b"data": np.zeros((1, 3072), np.uint8), b"labels": [0]}
    tmp_path.joinpath("test_batch").write_bytes(pickle.dumps(good, protocol=2))
    tmp_path.joinpath("data_batch_1").write_bytes(pickle.dumps(batch, protocol=2))
    with pytest.raises(DatasetError) as raised:
        load_dataset(f"cifar10:{tmp_path}")
    assert str(tmp_path / "data_batch_1") in str(raised.value)
    assert words in str(raised.value)
    assert "a pickle ran code" not in capsys.readouterr().out
