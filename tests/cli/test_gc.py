"""``dtrain gc`` after a client was killed: the run's shared memory and scratch directory are
removed, its record (still "running", its process gone) is recorded lost; what a live process
holds is kept."""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import multiprocessing
import os
import signal
import uuid

import pytest

from workbench.runtime.scratch import make_scratch_directory
from workbench.runtime.shared_memory import (
    hold_run_directory,
    release_run_directory,
    run_directory,
    unlink_run_segments,
)
from workbench.store import RunStore

pytestmark = pytest.mark.integration

cli_main = importlib.import_module("workbench.cli.main")


def _crash_holding(run_id: str, ready) -> None:
    """A client's leftovers: a run directory and a scratch directory, held, then SIGKILL."""
    hold_run_directory(run_id)
    scratch = make_scratch_directory()
    ready.send(scratch.path)
    os.kill(os.getpid(), signal.SIGKILL)


def test_gc_removes_a_killed_clients_leftovers_and_keeps_live_ones(store_root):
    dead_run, live_run = f"gc-dead-{uuid.uuid4().hex}", f"gc-live-{uuid.uuid4().hex}"
    receive, send = multiprocessing.get_context("fork").Pipe(duplex=False)
    child = multiprocessing.get_context("fork").Process(
        target=_crash_holding, args=(dead_run, send)
    )
    child.start()
    dead_scratch = receive.recv()
    child.join(10)
    assert child.exitcode == -signal.SIGKILL
    live_directory = hold_run_directory(live_run)
    live_scratch = make_scratch_directory()
    recorder = RunStore().create("20261126-000000-mirrored-abcdef", {"strategy": "mirrored"})
    status_path = recorder.run.path / "status.json"
    status = json.loads(status_path.read_text())
    status["pid"] = child.pid  # the killed client trained it
    status_path.write_text(json.dumps(status))

    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        assert cli_main.main(["gc"]) == 0

    assert not os.path.exists(run_directory(dead_run)) and not os.path.exists(dead_scratch)
    assert os.path.isdir(live_directory) and os.path.isdir(live_scratch.path)
    assert run_directory(dead_run) in output.getvalue() and dead_scratch in output.getvalue()
    assert json.loads(status_path.read_text())["state"] == "lost"
    live_scratch.close()
    release_run_directory(live_run)
    unlink_run_segments(live_run)
    assert not os.path.exists(live_directory)
