"""How soon the run store's status.json (what the JupyterLab sidebar lists) shows a live run's
step: the last step at once, the others within a quarter of a second."""

from workbench.events.records import ScalarEvent
from workbench.store import RunStore
from workbench.store import run_store as run_store_module

CONFIG = {"strategy": "mirrored", "devices": 2, "batch_size": 32}


def test_the_last_step_reaches_the_status_at_once(tmp_path, monkeypatch):
    monkeypatch.setattr(run_store_module, "STATUS_EVERY_S", 3600.0)  # only urgent rewrites
    recorder = RunStore(tmp_path).create("r1", CONFIG, steps=4)
    for step in range(3):
        recorder.record(ScalarEvent("loss", step, 1.0, 0.1 * step))
    assert recorder.run.status()["step"] == 1  # the first event rewrote, the next waited
    # The run evaluates and closes its cluster after its last step: no event may follow soon.
    recorder.record(ScalarEvent("loss", 3, 0.5, 0.4))
    status = recorder.run.status()
    assert status["state"] == "running" and status["step"] == 4 and status["loss"] == 0.5


def test_a_live_status_is_rewritten_at_least_four_times_a_second():
    assert run_store_module.STATUS_EVERY_S <= 0.25
