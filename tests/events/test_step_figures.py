"""Per-step figures from events that arrive as a cluster run logs them: a chunk of steps device
after device, then the chunk's losses."""

import pytest

from workbench.events.records import PhaseEvent
from workbench.events.step_figures import StepFigures


def chunk_events(device: str, offset: float) -> list[PhaseEvent]:
    """Steps 0-2 of one device: 0.25 s compute, then an all-reduce of 100 bytes each way, one
    step per second (``offset`` shifts the device's clock a little)."""
    events = []
    for step in range(3):
        start = step + offset
        events.append(PhaseEvent(device, "compute", step, start, start + 0.25))
        events.append(PhaseEvent(device, "allreduce", step, start + 0.25, start + 1.0, 100, 100))
    return events


def test_a_chunk_logged_device_after_device_gives_each_device_its_steps():
    figures = StepFigures(batch_size=64)
    for event in chunk_events("a", 0.0) + chunk_events("b", 0.1):
        figures.add_phase(event)
    paces = [figures.loss_seen(step) for step in range(3)]
    done = figures.complete_devices() + figures.drain()

    by_device = {(d.device, d.step): d for d in done}
    assert sorted(by_device) == [(device, step) for device in "ab" for step in range(3)]
    # The first step has only its own span (1 s); later ones the 1 s since the last ended.
    assert all(d.utilization == pytest.approx(0.25) for d in done)
    assert all(d.bytes_sent == 100 and d.bytes_received == 100 for d in done)
    # Steps end at 1.1, 2.1, 3.1 (device b is last): one global batch per second.
    assert paces[0] is None
    assert paces[1:] == [pytest.approx(64.0), pytest.approx(64.0)]


def test_a_device_step_is_complete_only_when_the_device_moves_on_or_its_loss_comes():
    figures = StepFigures(batch_size=32)
    figures.add_phase(PhaseEvent("a", "compute", 0, 0.0, 0.5))
    figures.add_phase(PhaseEvent("a", "update", 0, 0.5, 1.0))
    assert figures.complete_devices() == []  # step 0 may still have events to come
    figures.add_phase(PhaseEvent("a", "compute", 1, 1.0, 1.5))
    (first,) = figures.complete_devices()
    assert (first.step, first.utilization) == (0, 1.0)  # compute and update are both busy
    figures.loss_seen(1)
    (second,) = figures.complete_devices()
    assert (second.step, second.utilization) == (1, 1.0)


def test_a_step_recomputed_after_a_restart_gives_no_pace():
    figures = StepFigures(batch_size=32)
    for step, start in [(0, 0.0), (1, 1.0), (1, 5.0)]:  # step 1 again, after a restore
        figures.add_phase(PhaseEvent("a", "compute", step, start, start + 1.0))
        pace = figures.loss_seen(step)
    assert pace is None
    assert [d.step for d in figures.drain()] == [0, 1, 1]
