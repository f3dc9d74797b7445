"""Runs on clusters the user started: with the ``dask scheduler`` / ``dask worker`` command
lines (workers joining after the run asked for them), from Python as a client or a cluster
object (used, never closed), and the preflight's clear errors: a worker with another version
of the workbench, a worker that cannot read the data set, too few workers in time."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from distributed import Client, LocalCluster

from benchmarks.memory_suite import write_cifar10
from workbench.config import RunConfig
from workbench.launch.runner import run_training
from workbench.runtime.cluster import ClusterError

from .dask_cli import BIN, RUN, RUN_FLAGS

pytestmark = pytest.mark.integration


def test_a_run_waits_for_the_workers_of_a_scheduler_file_cluster(tmp_path, processes):
    """The run asks first; the scheduler and then its workers come later, as a batch
    system starts them (each only once the run says it waits for it). The run waits, says
    how many joined, then trains."""
    scheduler_file = tmp_path / "scheduler.json"
    joining = ["--scheduler-file", str(scheduler_file), "--wait-for-workers", "60"]
    run = subprocess.Popen(
        [str(BIN / "dtrain"), "run", *RUN_FLAGS, "--json", *joining],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    processes.started.append(run)
    # Nothing is started before the run says it waits (a bounded read: the run's own 60 s).
    told: list[str] = []
    for line in run.stderr:
        told.append(line)
        if "waiting for a scheduler to write" in line:
            break
    assert f"waiting for a scheduler to write {scheduler_file}" in "".join(told)
    processes.scheduler(scheduler_file)
    for line in run.stderr:  # then the workers, once the run waits for them
        told.append(line)
        if "0 of 2 workers joined the scheduler named in" in line:
            break
    for name in ("0", "1"):
        processes.worker(scheduler_file, name)
    out, err = run.communicate(timeout=120)
    assert run.returncode == 0, "".join(told) + err
    summary = json.loads(out)
    assert summary["devices"] == 2 and summary["steps"] == 6
    assert np.isfinite(summary["final_loss"])


def test_too_few_workers_in_time_is_an_error_naming_how_many_joined(tmp_path, processes):
    scheduler_file = tmp_path / "scheduler.json"
    processes.scheduler(scheduler_file)
    processes.worker(scheduler_file, "0")
    with pytest.raises(ClusterError, match=r"--wait-for-workers: 1 of the 2 workers .* within 3 s"):
        _wait_for_one_worker_then_run(scheduler_file, wait=3)


def _wait_for_one_worker_then_run(scheduler_file: Path, wait: float) -> None:
    deadline = time.monotonic() + 60
    while not scheduler_file.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    with Client(scheduler_file=str(scheduler_file), timeout=30) as client:
        client.wait_for_workers(1, timeout=60)
    config = RunConfig(**RUN, scheduler_file=str(scheduler_file), wait_for_workers=wait)
    run_training(config, progress=lambda line: None)


def test_a_worker_with_another_workbench_version_is_named(tmp_path, processes):
    scheduler_file = tmp_path / "scheduler.json"
    fake = tmp_path / "other_workbench_version.py"
    fake.write_text("import workbench\nworkbench.__version__ = '0.0.0+other'\n")
    processes.scheduler(scheduler_file)
    processes.worker(scheduler_file, "0")
    processes.worker(scheduler_file, "1", "--preload", str(fake))
    config = RunConfig(**RUN, scheduler_file=str(scheduler_file), wait_for_workers=60)
    with pytest.raises(ClusterError) as raised:
        run_training(config, progress=lambda line: None)
    message = str(raised.value)
    assert "worker 1 " in message
    assert "workbench 0.0.0+other (the client has " in message


def _one_worker_without_the_data(tmp_path: Path, processes) -> tuple[Path, Path]:
    """A scheduler and two workers; worker 1 runs as on another host: in a mount namespace
    where the data's folder is not there (an empty file system is mounted over its parent).
    Returns (the scheduler file, the data's folder: CIFAR-10 batches)."""
    scheduler_file = tmp_path / "scheduler.json"
    data = tmp_path / "data" / "cifar"
    write_cifar10(data, train_images=40, test_images=40)
    processes.scheduler(scheduler_file)
    processes.worker(scheduler_file, "0")
    hide = f'mount -t tmpfs none {data.parent} && exec "$@"'
    processes.worker(
        scheduler_file,
        "1",
        prefix=["unshare", "--mount", "--propagation", "private", "sh", "-c", hide, "sh"],
    )
    return scheduler_file, data


def test_a_worker_that_cannot_read_the_data_set_is_named(tmp_path, processes):
    scheduler_file, data = _one_worker_without_the_data(tmp_path, processes)
    config = RunConfig(
        **{**RUN, "dataset": f"cifar10:{data}", "model": "mlp", "batch_size": 8},
        scheduler_file=str(scheduler_file),
        wait_for_workers=60,
    )
    with pytest.raises(ClusterError) as raised:
        run_training(config, progress=lambda line: None)
    message = str(raised.value)
    assert message.startswith("--dataset: worker 1 ")
    assert f"cannot read cifar10:{data}: {data} does not exist" in message
    assert "--ship-data" in message  # what to do about it


def test_ship_data_sends_the_clients_copy_to_a_worker_that_cannot_read_it(tmp_path, processes):
    """The same two workers, worker 1 without the data's folder: with --ship-data the client
    sends its copy (once per host) and the run trains as on readable data."""
    scheduler_file, data = _one_worker_without_the_data(tmp_path, processes)
    run = {**RUN, "dataset": f"cifar10:{data}", "model": "mlp", "batch_size": 8}
    lines: list[str] = []
    shipped = run_training(
        RunConfig(**run, scheduler_file=str(scheduler_file), wait_for_workers=60, ship_data=True),
        progress=lines.append,
    )
    assert f"[data] cifar10:{data}: 1 copy for 2 devices (sent by this client)" in lines
    local = run_training(RunConfig(**run), progress=lambda line: None)
    assert shipped.summary["final_loss"] == local.summary["final_loss"]


def test_a_client_and_a_cluster_object_are_used_and_left_open():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True) as cluster:
        on_cluster = run_training(RunConfig(**RUN, cluster=cluster), progress=lambda line: None)
        assert cluster.status.name == "running"
        with Client(cluster) as client:
            on_client = run_training(RunConfig(**RUN, cluster=client), progress=lambda line: None)
            assert client.status == "running"
            assert client.submit(lambda: 41 + 1).result() == 42
            # Stored and shown as its scheduler's address.
            assert RunConfig(cluster=client).to_dict()["cluster"] == cluster.scheduler_address
    assert on_cluster.summary["final_loss"] == on_client.summary["final_loss"]
