"""A hand-made run with every fault event of docs/architecture/events.md, "Events", for the tests of
what shows a run (charts, run store, exports, notebook panel, server).

Two devices train data-parallel steps of 1 s: 0.6 s compute, then 0.2 s all-reduce. During step 3
``/task:1`` dies (noticed at 3.5 s); both devices restore step 2's checkpoint and take their first
step after it at 5.5 s (recovery 2 s), then steps 3 and 4 run. In step 4 a push of
``/task:0`` is dropped.
"""

from __future__ import annotations

from workbench.events.records import PhaseEvent, ScalarEvent

DEVICES = ("/task:0", "/task:1")
FAILED_DEVICE = "/task:1"
NOTICED, RESUMED = 3.5, 5.5
FAILURE = PhaseEvent(FAILED_DEVICE, "failure", 3, NOTICED, NOTICED)
DROPPED = PhaseEvent("/task:0", "dropped", 4, 7.1, 7.2, 4096)


def step(number: int, start: float) -> list[PhaseEvent | ScalarEvent]:
    events: list[PhaseEvent | ScalarEvent] = []
    for device in DEVICES:
        events.append(PhaseEvent(device, "compute", number, start, start + 0.6))
        events.append(PhaseEvent(device, "allreduce", number, start + 0.6, start + 0.8, 100, 100))
    events.append(ScalarEvent("loss", number, 2.0 / (number + 1), start + 0.8))
    return events


def before_the_failure() -> list[PhaseEvent | ScalarEvent]:
    """Steps 0 to 2, then the failure: what a reader has seen while the run restores."""
    events = [event for number in range(3) for event in step(number, float(number))]
    return [*events, FAILURE]


def after_the_failure() -> list[PhaseEvent | ScalarEvent]:
    """The recovery on both devices, the steps after it and the dropped push."""
    events: list[PhaseEvent | ScalarEvent] = [
        PhaseEvent(device, "recovery", 3, NOTICED, RESUMED) for device in DEVICES
    ]
    events += [
        ScalarEvent("restarts", 3, 1.0, RESUMED),
        ScalarEvent("recovery_seconds", 3, RESUMED - NOTICED, RESUMED),
    ]
    events += step(3, RESUMED) + step(4, RESUMED + 1.0)
    events += [DROPPED, ScalarEvent("dropped_updates", 4, 1.0, 7.2, device="/task:0")]
    return events


def fault_run() -> list[PhaseEvent | ScalarEvent]:
    return before_the_failure() + after_the_failure()
