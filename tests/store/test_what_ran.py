"""A run's record says what ran: the completed steps its handle, its summary and status.json
agree on, the state it really ended in, and why each failure happened (beside the final error
of a run that failed)."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from workbench.events.records import PhaseEvent, ScalarEvent
from workbench.store import RunStore
from workbench.store import run_store as run_store_module

CONFIG = {"strategy": "mirrored", "devices": 2, "batch_size": 32}
STALL = "task0-cpu0: StallError: step 4: task0 waited 1s for 'rs0' from task1, which stalled"


def _steps(first: int, end: int) -> list:
    events: list = []
    for step in range(first, end):
        events.append(PhaseEvent("/task:0", "compute", step, step, step + 0.5))
        events.append(ScalarEvent("loss", step, 1.0, step + 0.5))
    return events


def test_the_step_recorded_is_the_last_one_with_a_loss_and_at_the_end_the_summarys(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(run_store_module, "STATUS_EVERY_S", 0.0)
    recorder = RunStore(tmp_path).create("r1", CONFIG, steps=100)
    for event in _steps(0, 10):
        recorder.record(event)
    # A device's report of a later step than the run completed (a round cut by the stop).
    recorder.record(PhaseEvent("/task:1", "compute", 59, 10.0, 10.5))
    assert recorder.run.status()["step"] == 10
    recorder.finish("stopped", summary={"first_step": 0, "steps": 10})
    status = recorder.run.status()
    assert (status["state"], status["step"], status["steps"]) == ("stopped", 10, 100)


def test_a_stop_that_came_as_the_last_step_ran_leaves_the_run_finished():
    from workbench.launch.run_link import ended_state

    job = SimpleNamespace(stop=threading.Event(), total_steps=100)
    job.stop.set()
    assert ended_state(job, {"first_step": 40, "steps": 60}) == "finished"
    assert ended_state(job, {"first_step": 40, "steps": 20}) == "stopped"
    job.stop.clear()
    assert ended_state(job, {"first_step": 0, "steps": 100}) == "finished"


def test_a_failed_run_keeps_its_final_error_and_each_earlier_reason(tmp_path, monkeypatch):
    monkeypatch.setattr(run_store_module, "STATUS_EVERY_S", 3600.0)  # only urgent rewrites
    recorder = RunStore(tmp_path).create("r1", CONFIG, steps=100)
    for event in _steps(0, 5):
        recorder.record(event)
    recorder.record(PhaseEvent("/task:0", "failure", 4, 6.0, 6.0, reason=STALL))
    # The reason is in status.json at once, while the run restores.
    assert recorder.run.status()["failure_reasons"] == [f"step 4, {STALL}"]
    recorder.record(ScalarEvent("restarts", 0, 1.0, 7.0))
    died = "task1-cpu0: died (its worker left the cluster)"
    recorder.record(PhaseEvent("/task:1", "failure", 3, 9.0, 9.0, reason=died))
    recorder.finish("failed", error="DeviceFailure: /task:1 died during a step at step 3")
    status = recorder.run.status()
    assert status["state"] == "failed" and "died during a step" in status["error"]
    assert status["failure_reasons"] == [
        f"step 4, {STALL}; restarted from step 0",
        f"step 3, {died}",
    ]
    assert status["failures"] == 2 and status["restarts"] == 1
