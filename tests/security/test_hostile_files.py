"""Hostile data and checkpoint files: each is refused with a user error naming the file, fast,
before anything starts; none hangs, exhausts memory or ends in a traceback."""

from __future__ import annotations

import os
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tests.security.hostile_files import (
    DATA_FLAGS,
    RUN_FLAGS,
    archive_entries,
    array_npy,
    billion_laughs,
    good_arrays,
    good_idx_files,
    gzip_of_zeros,
    idx_header,
    npy_bytes,
    npz_bytes,
    prepare,
    reseal,
    resumable_checkpoint,
    write_cifar_python_dir,
    write_idx_dir,
    zip_bytes,
)
from workbench.checkpoint import CheckpointError
from workbench.config import ConfigError
from workbench.data import DatasetError, load_dataset

pytestmark = pytest.mark.timeout(30)  # a hang fails the test instead of the suite


def refused(error: type[Exception], action: Callable[[], object], *named: str) -> str:
    """Run ``action``, expect ``error`` within 10 s naming every string in ``named``; return
    its message."""
    start = time.monotonic()
    with pytest.raises(error) as raised:
        action()
    assert time.monotonic() - start < 10
    message = str(raised.value)
    for text in named:
        assert text in message, message
    return message


# --- checkpoints -----------------------------------------------------------------------------


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    return resumable_checkpoint(tmp_path / "ckpt")


def resume(checkpoint: Path) -> Callable[[], object]:
    return lambda: prepare([*RUN_FLAGS, "--resume", str(checkpoint)])


def test_a_checkpoint_array_declaring_10e12_elements_is_refused_not_allocated(checkpoint):
    params = checkpoint / "params.npz"
    entries = archive_entries(params)
    entries["dense_0/kernel.npy"] = npy_bytes("<f4", (10**6, 10**6), bytes(64))
    params.write_bytes(zip_bytes(entries))
    reseal(checkpoint, lambda m: m["params"]["dense_0/kernel"].update(shape=[10**6, 10**6]))
    message = refused(CheckpointError, resume(checkpoint), str(checkpoint))
    assert "TiB of memory" in message


def test_a_checkpoint_header_alone_declaring_10e12_elements_is_refused(checkpoint):
    params = checkpoint / "params.npz"
    entries = archive_entries(params)
    entries["dense_0/kernel.npy"] = npy_bytes("<f4", (10**6, 10**6), bytes(64))
    params.write_bytes(zip_bytes(entries))
    reseal(checkpoint)  # the manifest still lists the small shape
    message = refused(CheckpointError, resume(checkpoint), str(params), "'dense_0/kernel'")
    assert "(1000000, 1000000)" in message


def test_a_manifest_nested_200000_deep_is_refused(checkpoint):
    manifest = checkpoint / "manifest.json"
    manifest.write_text('{"config": ' + "[" * 200_000 + "]" * 200_000 + "}")
    refused(CheckpointError, resume(checkpoint), str(manifest), "nest")


def test_a_fifo_in_place_of_the_parameters_is_refused_without_waiting(checkpoint):
    params = checkpoint / "params.npz"
    params.unlink()
    os.mkfifo(params)
    refused(CheckpointError, resume(checkpoint), str(params), "FIFO")


def test_arrays_that_do_not_fit_the_model_are_refused_before_training(checkpoint):
    params = checkpoint / "params.npz"
    entries = archive_entries(params)
    entries["dense_0/kernel.npy"] = array_npy(np.zeros((16, 5), np.float32))
    params.write_bytes(zip_bytes(entries))
    reseal(checkpoint, lambda m: m["params"]["dense_0/kernel"].update(shape=[16, 5]))
    refused(
        CheckpointError, resume(checkpoint), str(params), "'dense_0/kernel'", "[16, 5]", "[16, 8]"
    )


def test_an_emptied_optimizer_state_is_refused_not_reset(checkpoint):
    (checkpoint / "optimizer.npz").write_bytes(zip_bytes({}))
    reseal(checkpoint, lambda m: m.update(optimizer_state={}))
    refused(
        CheckpointError,
        resume(checkpoint),
        str(checkpoint / "optimizer.npz"),
        "no optimizer state",
        "momentum",
    )


# --- data sets -------------------------------------------------------------------------------


def test_an_empty_npz_file_is_refused(tmp_path):
    path = tmp_path / "empty.npz"
    path.write_bytes(b"")
    refused(DatasetError, lambda: load_dataset(f"npz:{path}"), str(path), "empty")


def test_a_npy_file_named_npz_is_refused(tmp_path):
    path = tmp_path / "single.npz"
    path.write_bytes(array_npy(np.zeros((4, 4))))
    refused(DatasetError, lambda: load_dataset(f"npz:{path}"), str(path), ".npy")


def test_an_npz_array_declaring_10e12_elements_is_refused_not_allocated(tmp_path):
    path = tmp_path / "huge.npz"
    arrays = {f"{k}.npy": array_npy(v) for k, v in good_arrays().items()}
    arrays["x_train.npy"] = npy_bytes("<f8", (10**6, 10**6), bytes(64))
    path.write_bytes(zip_bytes(arrays))
    refused(DatasetError, lambda: load_dataset(f"npz:{path}"), str(path), "'x_train'")


def test_a_label_of_10e12_is_refused_when_loading(tmp_path):
    path = tmp_path / "labels.npz"
    arrays = good_arrays()
    arrays["y_train"] = arrays["y_train"].copy()
    arrays["y_train"][3] = 10**12
    path.write_bytes(npz_bytes(arrays))
    refused(DatasetError, lambda: load_dataset(f"npz:{path}"), str(path), "65536")
    refused(ConfigError, lambda: prepare(["--dataset", f"npz:{path}", *DATA_FLAGS]), str(path))


def test_a_fifo_named_as_an_npz_file_is_refused_without_waiting(tmp_path):
    path = tmp_path / "data.npz"
    os.mkfifo(path)
    refused(DatasetError, lambda: load_dataset(f"npz:{path}"), str(path), "FIFO")


@pytest.mark.parametrize(("depth", "width"), [(60, 2), (20, 8)], ids=["deep", "wide"])
def test_a_billion_laughs_cifar_pickle_is_refused_fast(tmp_path, depth, width):
    data = billion_laughs(depth, width)
    assert len(data) < 12_000
    directory = write_cifar_python_dir(tmp_path / "cifar", data)
    refused(
        DatasetError, lambda: load_dataset(f"cifar10:{directory}"), str(directory / "data_batch_1")
    )


def peak_bytes(action: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        with pytest.raises(DatasetError):
            action()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize(
    "header",
    [idx_header(8, 2, 28, 28), idx_header(8, 10**6, 10**3, 10**3)],
    ids=["declares 2 images", "declares 10^12 bytes"],
)
def test_an_idx_gzip_bomb_is_inflated_no_further_than_its_header(tmp_path, header):
    files = good_idx_files()
    files["train_images"] = gzip_of_zeros(header, 128 << 20)  # 128 MiB of zeros
    assert len(files["train_images"]) < 1 << 20
    directory = write_idx_dir(tmp_path / "mnist", files, gz=frozenset({"train_images"}))
    bomb = str(directory / "train-images-idx3-ubyte.gz")
    start = time.monotonic()
    assert peak_bytes(lambda: load_dataset(f"mnist:{directory}")) < 32 << 20
    assert time.monotonic() - start < 10
    refused(DatasetError, lambda: load_dataset(f"mnist:{directory}"), bomb)


def test_a_memory_error_while_loading_is_a_dataset_error_naming_the_file(tmp_path, monkeypatch):
    path = tmp_path / "mine.npz"
    path.write_bytes(npz_bytes(good_arrays()))

    def out_of_memory(*args, **kwargs):
        raise MemoryError

    monkeypatch.setattr("workbench.data.npz.arrays_dataset", out_of_memory)
    refused(DatasetError, lambda: load_dataset(f"npz:{path}"), str(path), "memory")
