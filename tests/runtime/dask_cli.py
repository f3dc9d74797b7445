"""Dask clusters started from the command line, as users start them (``dask scheduler``,
``dask worker``), for the tests of runs that join a cluster; and the small run they train."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from workbench.runtime.worker_environment import WORKER_ENVIRONMENT

BIN = Path(sys.executable).parent
RUN = dict(strategy="mirrored", devices=2, dataset="synthetic:16:4:256", hidden=(8,), steps=6)
RUN_FLAGS = ["--strategy", "mirrored", "--devices", "2", "--dataset", "synthetic:16:4:256"]
RUN_FLAGS += ["--hidden", "8", "--steps", "6", "--batch-size", "32", "--no-calibrate"]
SCHEDULER = ["--host", "127.0.0.1", "--port", "0", "--no-dashboard"]


class Processes:
    """Command-line processes a test starts, each in a process group of its own, all killed
    at the end (a failed test included)."""

    def __init__(self, tmp_path: Path) -> None:
        self.started: list[subprocess.Popen] = []
        self.logs = tmp_path

    def start(self, name: str, command: list[str], **options) -> subprocess.Popen:
        log = open(self.logs / f"{name}.log", "w")  # noqa: SIM115 (closed with the process)
        environment = {**os.environ, **WORKER_ENVIRONMENT, **options.pop("env", {})}
        process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=environment,
            start_new_session=True,
            **options,
        )
        self.started.append(process)
        return process

    def scheduler(self, scheduler_file: Path, *extra: str) -> None:
        command = [str(BIN / "dask"), "scheduler", "--scheduler-file", str(scheduler_file)]
        self.start("scheduler", [*command, *SCHEDULER, *extra])

    def worker(self, scheduler_file: Path, name: str, *extra: str, prefix=()) -> None:
        command = [str(BIN / "dask"), "worker", "--scheduler-file", str(scheduler_file)]
        command += ["--name", name, "--nthreads", "1", "--host", "127.0.0.1", "--no-dashboard"]
        self.start(f"worker-{name}", [*prefix, *command, *extra])

    def close(self) -> None:
        for process in self.started:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.started:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=15)
