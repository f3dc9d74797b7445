"""Small hostile data and checkpoint files, each made in milliseconds, and the one path a
user's files take before anything starts (flags parsed, run prepared, nothing running)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import pickle
import zipfile
import zlib
from pathlib import Path

import numpy as np

from workbench.checkpoint import save_checkpoint
from workbench.checkpoint.layout import manifest_checksum
from workbench.launch.flags import parse_run_flags
from workbench.launch.runner import PreparedRun, prepare_run
from workbench.models import build_model
from workbench.optim import init_slots, make_optimizer
from workbench.strategies import validate_config
from workbench.training.run_checkpoint import rng_state_at

# The smallest run a checkpoint can continue: 16 features, 4 classes, one hidden layer of 8.
RUN_FLAGS = [
    "--dataset",
    "synthetic:16:4:120",
    "--hidden",
    "8",
    "--batch-size",
    "8",
    "--steps",
    "3",
    "--optimizer",
    "momentum",
]
DATA_FLAGS = ["--hidden", "8", "--batch-size", "2", "--steps", "1"]
IDX_NAMES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}


def prepare(flags: list[str]) -> PreparedRun:
    """What ``dtrain run FLAGS`` does before it starts anything."""
    return prepare_run(parse_run_flags(flags))


# --- .npy and .npz --------------------------------------------------------------------------


def npy_bytes(descr: str, shape: tuple[int, ...], payload: bytes) -> bytes:
    """An ``.npy`` file whose header declares ``descr`` and ``shape``, whatever follows."""
    buffer = io.BytesIO()
    header = {"descr": descr, "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_1_0(buffer, header)
    return buffer.getvalue() + payload


def array_npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, np.asarray(array), allow_pickle=False)
    return buffer.getvalue()


def zip_bytes(entries: dict[str, bytes], compressed: bool = False) -> bytes:
    buffer = io.BytesIO()
    method = zipfile.ZIP_DEFLATED if compressed else zipfile.ZIP_STORED
    with zipfile.ZipFile(buffer, "w", compression=method) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def good_arrays() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "x_train": rng.integers(0, 256, (8, 4), dtype=np.uint8),
        "y_train": np.arange(8) % 2,
        "x_test": rng.integers(0, 256, (4, 4), dtype=np.uint8),
        "y_test": np.arange(4) % 2,
    }


def npz_bytes(arrays: dict[str, np.ndarray], compressed: bool = False) -> bytes:
    return zip_bytes({f"{k}.npy": array_npy(v) for k, v in arrays.items()}, compressed)


# --- IDX and CIFAR-10 --------------------------------------------------------------------------


def idx_header(code: int, *shape: int) -> bytes:
    return bytes([0, 0, code, len(shape)]) + b"".join(n.to_bytes(4, "big") for n in shape)


def good_idx_files(rows: int = 4) -> dict[str, bytes]:
    rng = np.random.default_rng(1)
    return {
        "train_images": idx_header(8, rows, 28, 28) + rng.bytes(rows * 784),
        "train_labels": idx_header(8, rows) + bytes(i % 10 for i in range(rows)),
        "test_images": idx_header(8, 2, 28, 28) + rng.bytes(2 * 784),
        "test_labels": idx_header(8, 2) + bytes([3, 7]),
    }


def write_idx_dir(directory: Path, files: dict[str, bytes], gz: frozenset = frozenset()) -> Path:
    """The four IDX files (by role), those in ``gz`` named ``.gz`` (their bytes as given)."""
    directory.mkdir(parents=True, exist_ok=True)
    for role, data in files.items():
        (directory / (IDX_NAMES[role] + (".gz" if role in gz else ""))).write_bytes(data)
    return directory


def gzip_of_zeros(prefix: bytes, zeros: int, chunk: int = 1 << 20) -> bytes:
    """gzip of ``prefix`` then ``zeros`` zero bytes, compressed a chunk at a time (a bomb of
    hundreds of MiB in a few hundred KiB, never held uncompressed)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [packer.compress(prefix)]
    block = bytes(chunk)
    for start in range(0, zeros, chunk):
        parts.append(packer.compress(block[: min(chunk, zeros - start)]))
    parts.append(packer.flush())
    return b"".join(parts)


def cifar_record_bytes(records: int, label: int = 1) -> bytes:
    return (bytes([label]) + bytes(range(256)) * 12) * records


def cifar_pickle(batch: object) -> bytes:
    return pickle.dumps(batch, protocol=2)


def good_cifar_batch(rows: int = 2) -> dict:
    return {b"data": np.zeros((rows, 3072), np.uint8), b"labels": [i % 10 for i in range(rows)]}


def billion_laughs(depth: int, width: int) -> bytes:
    """A CIFAR-10 Python batch whose labels are ``depth`` levels of ``width`` references to the
    level below: a few KB on disk, ``width ** depth`` labels for whoever walks it."""
    level: list = [0] * width
    for _ in range(depth):
        level = [level] * width
    return cifar_pickle({b"data": np.zeros((1, 3072), np.uint8), b"labels": level})


def write_cifar_python_dir(directory: Path, train: bytes, test: bytes | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "data_batch_1").write_bytes(train)
    (directory / "test_batch").write_bytes(test or cifar_pickle(good_cifar_batch()))
    return directory


def write_cifar_binary_dir(directory: Path, train: bytes, test: bytes | None = None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "data_batch_1.bin").write_bytes(train)
    (directory / "test_batch.bin").write_bytes(test or cifar_record_bytes(2))
    return directory


# --- checkpoints ------------------------------------------------------------------------------


def resumable_checkpoint(directory: Path, flags: list[str] = RUN_FLAGS) -> Path:
    """A checkpoint at step 1 that ``dtrain run FLAGS --resume DIRECTORY`` continues."""
    config = validate_config(parse_run_flags(flags))
    model = build_model(config.model, (16,), 4, config.hidden)
    params = model.init_parameters(config.seed, config.dtype)
    slots = init_slots(make_optimizer(config.optimizer), params)
    return save_checkpoint(
        directory,
        params=params,
        optimizer_state=slots,
        step=1,
        rng_state=rng_state_at(config, 1),
        config=config.to_dict(),
    )


def reseal(checkpoint: Path, edit=None) -> None:
    """Recompute every checksum in the manifest after an edit, as anyone who can write the
    files can: the checksums are not keyed, so only the other checks can refuse it."""
    path = checkpoint / "manifest.json"
    manifest = json.loads(path.read_text())
    if edit is not None:
        edit(manifest)
    for name in manifest["files"]:
        data = (checkpoint / name).read_bytes()
        manifest["files"][name] = {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    manifest["manifest_sha256"] = manifest_checksum(manifest)
    path.write_text(json.dumps(manifest, indent=2))


def archive_entries(path: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as archive:
        return {info.filename: archive.read(info) for info in archive.infolist()}


def gunzip(data: bytes) -> bytes:
    return gzip.decompress(data)
