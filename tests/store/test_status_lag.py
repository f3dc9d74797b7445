"""How soon the run store's status.json (what the JupyterLab sidebar lists) shows a live run's
step: the last step at once, with the run ``finished`` (as its panel says), the others within a
tenth of a second even when no later event comes to write them."""

import time

from workbench.events.records import PhaseEvent, ScalarEvent
from workbench.store import RunStore
from workbench.store import run_store as run_store_module

CONFIG = {"strategy": "mirrored", "devices": 2, "batch_size": 32}


def _entry(recorder):
    return recorder.run.entry()


def test_the_last_step_reaches_the_status_at_once_as_finished(tmp_path, monkeypatch):
    monkeypatch.setattr(run_store_module, "STATUS_EVERY_S", 3600.0)  # only urgent rewrites
    recorder = RunStore(tmp_path).create("r1", CONFIG, steps=4)
    for step in range(3):
        recorder.record(ScalarEvent("loss", step, 1.0, 0.1 * step))
    assert recorder.run.status()["step"] == 1  # the first event rewrote, the next waited
    assert _entry(recorder).state == "running"
    # The run evaluates and closes its cluster after its last step: no event may follow soon.
    recorder.record(ScalarEvent("loss", 3, 0.5, 0.4))
    status = recorder.run.status()
    assert status["state"] == "finished" and status["step"] == 4 and status["loss"] == 0.5
    assert status["ended"] is None and recorder.run.summary() is None
    assert _entry(recorder).recording  # its test point and summary are still to come
    recorder.finish("finished", summary={"steps": 4, "first_step": 0, "test_accuracy": 0.9})
    assert recorder.run.status()["ended"] is not None and not _entry(recorder).recording


def test_a_throttled_step_is_written_without_a_later_event(tmp_path, monkeypatch):
    monkeypatch.setattr(run_store_module, "STATUS_EVERY_S", 0.2)
    recorder = RunStore(tmp_path).create("r2", CONFIG, steps=100)
    recorder.record(ScalarEvent("loss", 0, 1.0, 0.0))
    recorder.record(ScalarEvent("loss", 1, 0.9, 0.01))  # within 0.2 s of the first write
    assert recorder.run.status()["step"] == 1
    deadline = time.monotonic() + 5
    while recorder.run.status()["step"] != 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert recorder.run.status()["step"] == 2  # the devices' next report may be seconds away
    recorder.finish("stopped")
    assert recorder.run.status()["state"] == "stopped"


def test_a_restart_after_the_last_step_makes_the_run_running_again(tmp_path):
    recorder = RunStore(tmp_path).create("r3", CONFIG, steps=2)
    recorder.record(ScalarEvent("loss", 1, 0.5, 0.4))
    assert recorder.run.status()["state"] == "finished"
    recorder.record(PhaseEvent("/task:1", "failure", 1.0, 1.1, 1, reason="StallError: waited"))
    recorder.record(ScalarEvent("restarts", 1, 1.0, 1.2))
    assert recorder.run.status()["state"] == "running"
    recorder.finish("finished")


def test_a_live_status_is_rewritten_at_least_ten_times_a_second():
    assert run_store_module.STATUS_EVERY_S <= 0.1
