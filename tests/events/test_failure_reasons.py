"""Each failure's reason, and the restart that followed it, as everything that shows a run in a
line reads them (status.json's and the ``--json`` summary's ``failure_reasons``)."""

from __future__ import annotations

from tests.fault_events import fault_run
from workbench.events.faults import REASON_CHARS, REASONS_KEPT, FaultTally, failure_reasons
from workbench.events.records import PhaseEvent, ScalarEvent
from workbench.store.run_store import event_from_dict

STALL = "task0-cpu0: StallError: step 3: task0 waited 1s for 'rs0' from task1, which stalled"


def _failure(step: int, reason: str = STALL) -> PhaseEvent:
    return PhaseEvent("/job:worker/task:0/device:CPU:0", "failure", step, 1.0, 1.0, reason=reason)


def test_each_failure_keeps_its_reason_and_the_step_it_restarted_from():
    events = [
        _failure(3),
        ScalarEvent("restarts", 2, 1.0, 2.0),
        _failure(5, "task1-cpu0: died (its worker left the cluster)"),
    ]
    assert failure_reasons(events) == [
        f"step 3, {STALL}; restarted from step 2",
        "step 5, task1-cpu0: died (its worker left the cluster)",
    ]


def test_a_failure_recorded_before_reasons_existed_is_counted_but_not_explained():
    tally = FaultTally()
    for event in fault_run():  # hand-made events without a reason
        tally.add(event)
    assert tally.failures == 1 and tally.restarts == 1
    assert tally.status()["failure_reasons"] == []


def test_reasons_are_short_and_only_the_latest_are_kept():
    tally = FaultTally()
    for step in range(REASONS_KEPT + 5):
        tally.add(_failure(step, "x" * 1000))
    reasons = tally.status()["failure_reasons"]
    assert len(reasons) == REASONS_KEPT and tally.failures == REASONS_KEPT + 5
    assert reasons[0].startswith("step 5, ") and all(len(r) <= REASON_CHARS for r in reasons)


def test_only_a_failure_line_carries_a_reason_and_old_lines_still_read():
    failure = _failure(3)
    assert event_from_dict(failure.to_dict()) == failure
    compute = PhaseEvent("/task:0", "compute", 3, 0.0, 1.0)
    assert "reason" not in compute.to_dict()  # every other event line as it was
    old = {"kind": "phase", "device": "/task:1", "phase": "failure", "step": 3}
    assert event_from_dict({**old, "start": 1.0, "end": 1.0}).reason == ""
