"""Chart tables computed from events alone: a hand-made two-device timeline gives known
utilization, traffic, step times and throughput."""

from __future__ import annotations

import pytest

from workbench.events import EventLog
from workbench.notebook.chart_data import ChartFeed


def _two_devices() -> EventLog:
    log = EventLog()
    for step in range(3):
        base = step * 1.0
        log.phase("/task:0", "compute", step, base, base + 0.6)
        log.phase("/task:0", "allreduce", step, base + 0.6, base + 0.8, 100, 50)
        log.phase("/task:1", "compute", step, base, base + 0.3)
        log.phase("/task:1", "allreduce", step, base + 0.3, base + 0.8, 100, 50)
        log.scalar("loss", step, 2.0 - step, base + 0.8)
    return log


def test_utilization_traffic_and_step_times_per_device():
    update = ChartFeed(_two_devices(), batch_size=64).update()
    usage = update.replaced["utilization"]
    assert usage["device"] == ["/task:0", "/task:1"]
    # The last 2.8 s (everything): task 0 computed 1.8 s and communicated 0.6 s.
    assert usage["compute"] == pytest.approx([1.8 / 2.8, 0.9 / 2.8])
    assert usage["communication"] == pytest.approx([0.6 / 2.8, 1.5 / 2.8])
    assert usage["idle"] == pytest.approx([0.4 / 2.8, 0.4 / 2.8])
    assert update.replaced["traffic"] == {
        "device": ["/task:0", "/task:1"],
        "sent": [300, 300],
        "received": [150, 150],
    }
    times = update.replaced["stragglers"]
    assert times["median"] == pytest.approx([0.8, 0.8])
    assert len(update.appended["timeline"]["phase"]) == 12


def test_updates_carry_only_what_arrived_since_the_last_one():
    log = _two_devices()
    feed = ChartFeed(log, batch_size=64)
    first = feed.update()
    assert first.appended["loss"]["step"] == [0, 1, 2]
    # Two steps a second apart in the window: 64 samples per second.
    assert first.appended["throughput"]["samples_per_second"] == pytest.approx([64.0, 64.0])
    assert feed.update().appended == {}
    log.scalar("loss", 3, 0.5, 3.3)
    later = feed.update()
    assert later.appended["loss"]["step"] == [3] and "utilization" not in later.replaced
