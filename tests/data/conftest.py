"""Writers for small, real dataset files in pytest's tmp_path (nothing is ever downloaded)."""

from __future__ import annotations

import gzip
from collections.abc import Callable, Collection
from pathlib import Path

import numpy as np
import pytest

from workbench.data.cifar10 import IMAGE_SHAPE, TEST_BATCH
from workbench.data.idx import IDX_FILES

_IDX_CODES = {
    np.dtype(np.uint8): 0x08,
    np.dtype(np.int8): 0x09,
    np.dtype(np.int16): 0x0B,
    np.dtype(np.int32): 0x0C,
    np.dtype(np.float32): 0x0D,
    np.dtype(np.float64): 0x0E,
}


def encode_idx(array: np.ndarray) -> bytes:
    """The bytes of an IDX file holding ``array`` (big-endian, as the format requires)."""
    array = np.asarray(array)
    header = bytes([0, 0, _IDX_CODES[array.dtype], array.ndim])
    sizes = np.asarray(array.shape, dtype=">u4").tobytes()
    return header + sizes + array.astype(array.dtype.newbyteorder(">")).tobytes()


def random_images(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    images = rng.integers(0, 256, size=shape, dtype=np.uint8)
    # Pin both extremes so range tests see exactly 0.0 and 1.0.
    images.flat[0], images.flat[-1] = 0, 255
    return images


@pytest.fixture
def idx_encoder() -> Callable[[np.ndarray], bytes]:
    return encode_idx


MakeIdxDir = Callable[..., tuple[Path, dict[str, np.ndarray]]]


@pytest.fixture
def make_idx_dir(tmp_path: Path) -> MakeIdxDir:
    """Factory: write the four MNIST-style IDX files; return (directory, raw arrays by role).

    ``compress`` is True (all ``.gz``), False (all plain) or the roles to gzip.
    """

    def make(
        folder: str = "mnist",
        *,
        n_train: int = 12,
        n_test: int = 5,
        height: int = 28,
        width: int = 28,
        compress: bool | Collection[str] = False,
        seed: int = 0,
    ) -> tuple[Path, dict[str, np.ndarray]]:
        rng = np.random.default_rng(seed)
        arrays = {
            "train_images": random_images(rng, (n_train, height, width)),
            "train_labels": rng.integers(0, 10, size=n_train, dtype=np.uint8),
            "test_images": random_images(rng, (n_test, height, width)),
            "test_labels": rng.integers(0, 10, size=n_test, dtype=np.uint8),
        }
        directory = tmp_path / folder
        directory.mkdir(parents=True, exist_ok=True)
        for role, array in arrays.items():
            gzipped = compress if isinstance(compress, bool) else role in compress
            data = encode_idx(array)
            if gzipped:
                (directory / f"{IDX_FILES[role]}.gz").write_bytes(gzip.compress(data))
            else:
                (directory / IDX_FILES[role]).write_bytes(data)
        return directory, arrays

    return make


MakeCifarDir = Callable[..., tuple[Path, dict[str, tuple[np.ndarray, np.ndarray]]]]


@pytest.fixture
def make_cifar_dir(tmp_path: Path) -> MakeCifarDir:
    """Factory: write CIFAR-10 binary batches; return (directory, {file: (images, labels)})."""

    def make(
        folder: str = "cifar",
        *,
        train_batches: Collection[int] = (1, 2),
        records: int = 4,
        seed: int = 0,
    ) -> tuple[Path, dict[str, tuple[np.ndarray, np.ndarray]]]:
        rng = np.random.default_rng(seed)
        directory = tmp_path / folder
        directory.mkdir(parents=True, exist_ok=True)
        names = [f"data_batch_{index}.bin" for index in train_batches] + [TEST_BATCH]
        written = {}
        for name in names:
            images = random_images(rng, (records, *IMAGE_SHAPE))
            labels = rng.integers(0, 10, size=records, dtype=np.uint8)
            rows = np.concatenate([labels[:, None], images.reshape(records, -1)], axis=1)
            (directory / name).write_bytes(rows.tobytes())
            written[name] = (images, labels)
        return directory, written

    return make
