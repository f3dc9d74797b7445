"""MNIST / Fashion-MNIST IDX files: real header parsing, gzip or plain, and named errors."""

from __future__ import annotations

import gzip
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from workbench.data import DatasetError, load_dataset
from workbench.data.idx import IDX_FILES, parse_idx

MakeIdxDir = Callable[..., tuple[Path, dict[str, np.ndarray]]]  # see conftest.make_idx_dir

TRAIN_IMAGES = IDX_FILES["train_images"]
TRAIN_LABELS = IDX_FILES["train_labels"]
TEST_IMAGES = IDX_FILES["test_images"]
TEST_LABELS = IDX_FILES["test_labels"]


def test_loads_shapes_dtypes_and_exact_values(make_idx_dir: MakeIdxDir) -> None:
    directory, raw = make_idx_dir(n_train=12, n_test=5)
    ds = load_dataset(f"mnist:{directory}")
    assert ds.name == "mnist"
    assert ds.input_shape == (1, 28, 28)
    assert ds.num_classes == 10
    assert ds.x_train.shape == (12, 1, 28, 28)
    assert ds.x_test.shape == (5, 1, 28, 28)
    assert ds.x_train.dtype == ds.x_test.dtype == np.uint8
    assert ds.y_train.dtype == ds.y_test.dtype == np.int64
    train, test = ds.model_inputs("train", "float64")[:], ds.model_inputs("test", "float64")[:]
    assert train.min() == 0.0 and train.max() == 1.0
    np.testing.assert_array_equal(train[:, 0], raw["train_images"] / 255.0)
    np.testing.assert_array_equal(test[:, 0], raw["test_images"] / 255.0)
    np.testing.assert_array_equal(ds.y_train, raw["train_labels"])
    np.testing.assert_array_equal(ds.y_test, raw["test_labels"])


def test_gzip_and_plain_files_load_identically(make_idx_dir: MakeIdxDir) -> None:
    plain_dir, _ = make_idx_dir("plain", compress=False, seed=5)
    gzip_dir, _ = make_idx_dir("gzip", compress=True, seed=5)
    mixed_dir, _ = make_idx_dir("mixed", compress=("train_images", "test_labels"), seed=5)
    assert (gzip_dir / f"{TRAIN_IMAGES}.gz").exists() and not (gzip_dir / TRAIN_IMAGES).exists()
    plain = load_dataset(f"mnist:{plain_dir}")
    for other_dir in (gzip_dir, mixed_dir):
        other = load_dataset(f"mnist:{other_dir}")
        for name in ("x_train", "y_train", "x_test", "y_test"):
            np.testing.assert_array_equal(getattr(other, name), getattr(plain, name))


def test_image_size_comes_from_the_header(make_idx_dir: MakeIdxDir) -> None:
    directory, _ = make_idx_dir(height=7, width=9)
    ds = load_dataset(f"fashion-mnist:{directory}")
    assert ds.name == "fashion-mnist"
    assert ds.input_shape == (1, 7, 9)
    assert ds.x_train.shape == (12, 1, 7, 9)


def test_plain_file_wins_over_gz_when_both_exist(make_idx_dir: MakeIdxDir) -> None:
    directory, raw = make_idx_dir(compress=False)
    # A stale .gz with other labels beside the plain file must not be read.
    stale = raw["train_labels"][::-1].copy()
    header = bytes([0, 0, 0x08, 1]) + len(stale).to_bytes(4, "big")
    (directory / f"{TRAIN_LABELS}.gz").write_bytes(gzip.compress(header + stale.tobytes()))
    np.testing.assert_array_equal(load_dataset(f"mnist:{directory}").y_train, raw["train_labels"])


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.int32, np.float32, np.float64])
def test_parse_idx_reads_every_dtype_code_big_endian(
    dtype: type, idx_encoder: Callable[[np.ndarray], bytes]
) -> None:
    # Negative values wrap for uint8, which still round-trips and checks the byte order.
    array = np.arange(-5, 19).reshape(2, 3, 4).astype(dtype) * 3
    parsed = parse_idx(idx_encoder(array))
    assert parsed.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(parsed, array)


def _corrupt(directory: Path, name: str, change: Callable[[bytes], bytes]) -> None:
    path = directory / name
    path.write_bytes(change(path.read_bytes()))


def _header(code: int, *sizes: int) -> bytes:
    return bytes([0, 0, code, len(sizes)]) + b"".join(s.to_bytes(4, "big") for s in sizes)


# Each case: (file to damage, how, words the message must contain besides the file name).
MALFORMED = {
    "bad magic": (TRAIN_IMAGES, lambda data: b"\x08\x03" + data[2:], "magic"),
    "unknown dtype code": (TRAIN_IMAGES, lambda data: data[:2] + b"\x42" + data[3:], "dtype"),
    "images with 2 dimensions": (
        TEST_IMAGES,
        lambda data: _header(0x08, 5, 784) + data[16:],
        "dimensions",
    ),
    "labels with 2 dimensions": (
        TRAIN_LABELS,
        lambda data: _header(0x08, 6, 2) + data[8:],
        "dimensions",
    ),
    "truncated data": (TRAIN_IMAGES, lambda data: data[:-10], "truncated"),
    "truncated header": (TEST_LABELS, lambda data: data[:6], "truncated"),
    "empty file": (TEST_LABELS, lambda data: b"", "truncated"),
    "trailing bytes": (TEST_IMAGES, lambda data: data + b"\x00\x00", "longer"),
    "images not bytes": (
        TRAIN_IMAGES,
        lambda data: _header(0x0B, 12, 14, 28) + data[16:],
        "unsigned bytes",
    ),
    "label count differs": (
        TRAIN_LABELS,
        lambda data: _header(0x08, 11) + data[8:-1],
        "11 labels",
    ),
    "label out of range": (
        TEST_LABELS,
        lambda data: data[:-1] + b"\x0a",
        "label 10",
    ),
}


@pytest.mark.parametrize("case", MALFORMED, ids=list(MALFORMED))
def test_malformed_file_raises_naming_the_file(make_idx_dir: MakeIdxDir, case: str) -> None:
    name, change, words = MALFORMED[case]
    directory, _ = make_idx_dir()
    _corrupt(directory, name, change)
    with pytest.raises(DatasetError) as raised:
        load_dataset(f"mnist:{directory}")
    assert name in str(raised.value)
    assert words in str(raised.value)


@pytest.mark.parametrize(
    "change",
    [lambda data: data[: len(data) // 2], lambda data: data[:12] + bytes(len(data) - 12)],
    ids=["truncated gzip", "corrupt gzip"],
)
def test_broken_gzip_file_names_the_file(
    make_idx_dir: MakeIdxDir, change: Callable[[bytes], bytes]
) -> None:
    directory, _ = make_idx_dir(compress=True)
    path = directory / f"{TEST_IMAGES}.gz"
    path.write_bytes(change(path.read_bytes()))
    with pytest.raises(DatasetError, match=f"{TEST_IMAGES}.gz"):
        load_dataset(f"mnist:{directory}")


def test_gzip_is_detected_by_content_not_by_name(make_idx_dir: MakeIdxDir) -> None:
    plain_dir, _ = make_idx_dir("plain", compress=False)
    renamed_dir, _ = make_idx_dir("renamed", compress=True)
    for role in ("train_images", "test_labels"):
        name = IDX_FILES[role]
        (renamed_dir / f"{name}.gz").rename(renamed_dir / name)  # compressed, but no .gz
    plain = load_dataset(f"mnist:{plain_dir}")
    renamed = load_dataset(f"mnist:{renamed_dir}")
    np.testing.assert_array_equal(renamed.x_train, plain.x_train)
    np.testing.assert_array_equal(renamed.y_test, plain.y_test)


def test_train_and_test_image_sizes_must_agree(make_idx_dir: MakeIdxDir, tmp_path: Path) -> None:
    directory, _ = make_idx_dir("a", height=28, width=28)
    other, _ = make_idx_dir("b", height=20, width=20)
    (directory / TEST_IMAGES).write_bytes((other / TEST_IMAGES).read_bytes())
    with pytest.raises(DatasetError, match="different image sizes"):
        load_dataset(f"mnist:{directory}")


def test_missing_file_names_the_full_path(make_idx_dir: MakeIdxDir) -> None:
    directory, _ = make_idx_dir()
    (directory / TEST_LABELS).unlink()
    with pytest.raises(DatasetError) as raised:
        load_dataset(f"mnist:{directory}")
    assert str((directory / TEST_LABELS).resolve()) in str(raised.value)


def test_missing_directory_names_the_full_path(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-dir"
    with pytest.raises(DatasetError) as raised:
        load_dataset(f"fashion-mnist:{missing}")
    assert str(missing.resolve()) in str(raised.value)
