"""The memory suite follows a whole ``dtrain run`` process and its workers: one small run,
its peaks read from the kernel, its report rendered."""

from __future__ import annotations

import math

import pytest

from benchmarks.memory_suite import (
    MemorySettings,
    render,
    run_memory_suite,
    write_cifar10,
)
from workbench.data import load_dataset


def test_write_cifar10_writes_a_loadable_data_set(tmp_path):
    write_cifar10(tmp_path / "cifar", train_images=12, test_images=3)
    data = load_dataset(f"cifar10:{tmp_path / 'cifar'}")
    assert data.x_train.shape == (12, 3, 32, 32) and len(data.y_test) == 3


@pytest.mark.integration
def test_a_run_reports_the_peaks_of_its_client_and_each_worker():
    lines: list[str] = []
    settings = MemorySettings(steps=2, train_images=600, test_images=50)
    result = run_memory_suite(settings, lines.append)
    row = result["rows"]["this checkout"]
    # A Python process with NumPy and Dask loaded holds tens of MiB at the least.
    assert row["client_mib"]["median"] > 30 and row["worker_mib"]["median"] > 30
    assert len(row["final_loss"]) == 1 and math.isfinite(row["final_loss"][0])
    assert any("workers" in line for line in lines)
    report = render(result)
    assert "| this checkout" in report and "worker_drop" not in result
