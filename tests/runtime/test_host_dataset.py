"""The data set held once per host: one owner-only shared-memory copy in its stored type,
mapped read-only by every worker of the host, its name unlinked as soon as they all mapped
it; sent by the client (once per host) when the workers are not to read it themselves."""

from __future__ import annotations

import os
import stat
import uuid
from pathlib import Path

import numpy as np
import pytest
from distributed import Client, LocalCluster

from benchmarks.memory_suite import write_cifar10
from workbench.data import load_dataset
from workbench.data.user_arrays import fit_arrays_dataset
from workbench.runtime.host_dataset import (
    forget_dataset,
    read_segment,
    stage_dataset,
    worker_dataset,
    write_segment,
)
from workbench.runtime.shared_memory import LOCK_NAME, run_directory
from workbench.safe_io import ForeignPathError


def test_a_segment_is_its_owners_only_and_reads_back_read_only(tmp_path):
    digits = load_dataset("digits")
    path = tmp_path / "segment"
    shared = write_segment(str(path), digits)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    copy = read_segment(shared)
    assert copy.x_train.dtype == np.uint8 and copy.input_scale == digits.input_scale
    for name in ("x_train", "y_train", "x_test", "y_test"):
        np.testing.assert_array_equal(getattr(copy, name), getattr(digits, name))
        assert not getattr(copy, name).flags.writeable
    with pytest.raises(ForeignPathError):  # never written over
        write_segment(str(path), digits)


def _held_summary(run_id: str, spec: str) -> dict:
    """On a worker: what it holds for the run, and whether that is a mapping of a shared-memory
    segment whose name is gone."""
    dataset = worker_dataset(run_id, spec, 0)
    maps = Path("/proc/self/maps").read_text()
    directory = run_directory(run_id)  # renamed away before it was removed
    mapped = [line for line in maps.splitlines() if directory in line and "/dataset-" in line]
    return {
        "x_train": np.array(dataset.x_train),
        "y_test": np.array(dataset.y_test),
        "dtype": str(dataset.x_train.dtype),
        "mapped_deleted": bool(mapped) and all(line.endswith("(deleted)") for line in mapped),
    }


@pytest.fixture(scope="module")
def client():
    with (
        LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1") as c,
        Client(c) as client,
    ):
        yield client


def _segments(run_id: str) -> list[str]:
    try:
        return sorted(set(os.listdir(run_directory(run_id))) - {LOCK_NAME})
    except FileNotFoundError:
        return []


@pytest.mark.integration
def test_workers_of_one_host_map_one_copy_loaded_on_the_host(client, tmp_path):
    folder = tmp_path / "cifar"
    write_cifar10(folder, train_images=30, test_images=30)
    spec, run_id = f"cifar10:{folder}", uuid.uuid4().hex[:12]
    addresses = sorted(client.scheduler_info()["workers"])
    lines: list[str] = []
    held = stage_dataset(client, run_id, addresses, spec, 0, None, lines.append)
    assert sorted(held.values()) == ["leader", "shared"]
    assert lines == [f"[data] {spec}: 1 copy for 2 devices (loaded on each host)"]
    assert _segments(run_id) == []  # unlinked once both mapped it
    expected = load_dataset(spec)
    for summary in client.run(_held_summary, run_id, spec).values():
        assert summary["dtype"] == "uint8" and summary["mapped_deleted"]
        np.testing.assert_array_equal(summary["x_train"], expected.x_train)
        np.testing.assert_array_equal(summary["y_test"], expected.y_test)
    client.run(forget_dataset, run_id)
    assert not any(
        s["mapped_deleted"] for s in client.run(_held_summary, run_id, "digits").values()
    )


@pytest.mark.integration
def test_the_clients_copy_is_sent_once_per_host(client):
    generator = np.random.default_rng(1)
    x, y = generator.random((40, 5)), generator.integers(0, 3, 40)
    arrays = fit_arrays_dataset(x, y)
    run_id = uuid.uuid4().hex[:12]
    addresses = sorted(client.scheduler_info()["workers"])
    # The name cannot be loaded on a worker: only the shipped copy makes this work.
    held = stage_dataset(client, run_id, addresses, arrays.name, 0, arrays)
    assert sorted(held.values()) == ["leader", "shared"]
    for summary in client.run(_held_summary, run_id, arrays.name).values():
        assert summary["mapped_deleted"]
        np.testing.assert_array_equal(summary["x_train"], x[:32])
    client.run(forget_dataset, run_id)
    assert _segments(run_id) == []
