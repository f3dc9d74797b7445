"""The measured bubble of a pipeline run, computed from phase events, equals the schedule's
theoretical bubble when the events are a perfect GPipe timeline."""

from __future__ import annotations

import pytest

from workbench.events import EventLog, bubble_fraction
from workbench.events.records import PhaseEvent
from workbench.parallel.pipeline import gpipe_bubble, make_schedule, play_schedule

FORWARD, BACKWARD, UPDATE = 1.0, 2.0, 0.5


def _timeline(stages: int, microbatches: int, steps: int) -> EventLog:
    """``steps`` back-to-back GPipe steps as the stage workers report them: compute phases,
    an update after each step, and each later stage's receive posted right after its update."""
    simulation = play_schedule(make_schedule("gpipe", stages, microbatches), FORWARD, BACKWARD)
    log, origin = EventLog(), 0.0
    devices = [f"stage{s}" for s in range(stages)]
    for step in range(steps):
        for (stage, kind, _), end in simulation.finish.items():
            cost = FORWARD if kind == "F" else BACKWARD
            log.emit(PhaseEvent(devices[stage], "compute", step, origin + end - cost, origin + end))
        for stage in range(stages):
            done = origin + max(e for (s, _, _), e in simulation.finish.items() if s == stage)
            log.emit(PhaseEvent(devices[stage], "update", step, done, done + UPDATE))
            if stage > 0 and step + 1 < steps:
                # Waits for the next step's first activation: the stage before is still busy.
                log.emit(PhaseEvent(devices[stage], "recv", step + 1, done + UPDATE, done + 9))
        origin += simulation.makespan + UPDATE
    return log


@pytest.mark.parametrize(("stages", "microbatches"), [(2, 1), (2, 4), (2, 8), (3, 4), (4, 16)])
def test_a_perfect_gpipe_timeline_measures_the_papers_bubble(stages, microbatches):
    log = _timeline(stages, microbatches, steps=12)
    devices = [f"stage{s}" for s in range(stages)]
    assert bubble_fraction(log, devices) == pytest.approx(gpipe_bubble(stages, microbatches))


def test_time_outside_compute_inside_the_step_counts_as_bubble():
    log = EventLog()
    for device, phase, start, end in [
        ("a", "compute", 0.0, 1.0),
        ("b", "recv", 0.0, 3.0),  # waiting inside the step's span: bubble
        ("b", "compute", 3.0, 4.0),
        ("a", "compute", 3.0, 4.0),
    ]:
        log.emit(PhaseEvent(device, phase, 0, start, end))
    # Span 4 on 2 devices, 3 units of compute.
    assert bubble_fraction(log, ["a", "b"]) == pytest.approx(1 - 3 / 8)


def test_no_compute_means_no_figure():
    log = EventLog()
    log.emit(PhaseEvent("a", "recv", 0, 0.0, 1.0))
    assert bubble_fraction(log, ["a"]) is None
