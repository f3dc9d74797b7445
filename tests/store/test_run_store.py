"""The run store as other processes read it: live status, incremental event reads, and a stop
asked through the store ending a live run of the notebook."""

from __future__ import annotations

import json
import os
import socket

import pytest

from workbench.config import RunConfig
from workbench.events.records import PhaseEvent, ScalarEvent
from workbench.launch.background_run import BackgroundRun
from workbench.store import RunStore
from workbench.store import run_store as run_store_module


def _config(batch_size: int = 32) -> dict:
    return {"strategy": "mirrored", "devices": 2, "batch_size": batch_size}


def test_a_new_run_says_who_trains_it_and_how_long_it_will_be(tmp_path):
    recorder = RunStore(tmp_path).create("r1", _config(), steps=40)
    status = recorder.run.status()
    assert status["state"] == "running" and status["step"] == 0 and status["steps"] == 40
    assert status["pid"] == os.getpid() and status["hostname"] == socket.gethostname()
    assert status["loss"] is None and status["samples_per_second"] is None


def test_a_live_run_rewrites_its_status_with_step_loss_and_throughput(tmp_path, monkeypatch):
    monkeypatch.setattr(run_store_module, "STATUS_EVERY_S", 0.0)  # rewrite at every event
    recorder = RunStore(tmp_path).create("r1", _config(batch_size=64), steps=100)
    for step in range(10):  # one step every 0.5 s of run time: 128 samples/s
        recorder.record(ScalarEvent("loss", step, 2.0 - step / 10, 0.5 * step))
    status = recorder.run.status()
    assert status["step"] == 10 and status["loss"] == pytest.approx(1.1)
    # The window keeps the last 5 s: steps 0..9 span 4.5 s.
    assert status["samples_per_second"] == pytest.approx(9 * 64 / 4.5)
    recorder.annotate(dashboard_link="http://127.0.0.1:8787/status")
    recorder.finish("finished", summary={"samples_per_second": 120.0})
    status = recorder.run.status()
    assert status["state"] == "finished" and status["samples_per_second"] == 120.0
    assert status["dashboard_link"] == "http://127.0.0.1:8787/status"


def test_events_are_read_incrementally_and_a_half_written_line_waits(tmp_path):
    recorder = RunStore(tmp_path).create("r1", _config())
    recorder.record(PhaseEvent("/task:0", "compute", 0, 0.0, 0.1))
    recorder.record(ScalarEvent("loss", 0, 2.3, 0.1))
    recorder.finish("finished")
    run = recorder.run
    events, offset = run.read_events(0)
    assert [type(event).__name__ for event in events] == ["PhaseEvent", "ScalarEvent"]
    with (run.path / "events.jsonl").open("a", encoding="utf-8") as file:
        file.write(json.dumps(ScalarEvent("loss", 1, 2.1, 0.2).to_dict()) + "\n")
        file.write('{"kind": "scalar", "name": "lo')  # still being written
    more, later = run.read_events(offset)
    assert [event.step for event in more] == [1]
    assert run.read_events(later) == ([], later)


@pytest.mark.integration
def test_a_stop_asked_through_the_store_ends_a_live_notebook_run(tmp_path):
    store = RunStore(tmp_path)
    config = RunConfig(strategy="one-device", steps=100_000, hidden=(16,))
    run = BackgroundRun(config, store=store)
    stored = store.open(run.run_id)
    assert not stored.stop_requested()
    stored.request_stop()  # what the JupyterLab sidebar's Stop does, from another process
    run.wait(120)
    assert run.state == "stopped" and run.step < 100_000
    assert stored.status()["state"] == "stopped"
