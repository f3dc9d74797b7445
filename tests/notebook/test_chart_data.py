"""Chart tables computed from events alone: a hand-made two-device timeline gives known
utilization, traffic, step times and throughput."""

from __future__ import annotations

import pytest

from workbench.charts.chart_data import ChartFeed
from workbench.events import EventLog


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
    # Steps end a second apart (64 samples per second); step 2 is not known complete yet.
    assert first.appended["throughput"]["step"] == [1]
    assert first.appended["throughput"]["samples_per_second"] == pytest.approx([64.0])
    assert feed.update().appended == {}
    log.scalar("loss", 3, 0.5, 3.3)
    later = feed.update()
    assert later.appended["loss"]["step"] == [3] and "utilization" not in later.replaced
    log.phase("/task:0", "compute", 3, 3.0, 3.2)
    assert feed.update().appended["throughput"]["step"] == [2]  # a later step began
    log.scalar("test_loss", 3, 0.4, 3.5)
    assert feed.update().appended["throughput"]["step"] == [3]  # the run ended


def test_throughput_follows_when_steps_ran_not_when_their_losses_arrived():
    log = EventLog()
    for step in range(20):  # steps 10 ms apart, losses reported in one batch at the end
        log.phase("/task:0", "compute", step, step * 0.01, step * 0.01 + 0.009)
    for step in range(20):
        log.scalar("loss", step, 1.0, 5.0)
    log.scalar("test_loss", 19, 1.0, 5.1)
    rates = ChartFeed(log, batch_size=32).update().appended["throughput"]["samples_per_second"]
    assert rates == pytest.approx([3200.0] * 19)


def test_gpu_devices_show_nvml_utilization_and_memory_next_to_their_busy_share():
    log = _two_devices()
    # What the step loop emits on GPUs from each worker's NVML heartbeat figures.
    log.scalar("gpu_utilization", 2, 87.0, 2.8, device="/task:0")
    log.scalar("gpu_memory_used", 2, 3 * 2**30, 2.8, device="/task:0")
    usage = ChartFeed(log, batch_size=64).update().replaced["utilization"]
    assert usage["gpu_utilization"][0] == pytest.approx(0.87)
    assert usage["gpu_memory_used"][0] == 3 * 2**30
    # A device without NVML figures (any CPU device) has none: NaN, which is not drawn.
    assert usage["gpu_utilization"][1] != usage["gpu_utilization"][1]


def test_charts_show_the_nvml_marker_only_when_a_device_has_nvml_figures():
    from workbench.charts.live_charts import LiveCharts

    log = _two_devices()
    charts = LiveCharts(log, batch_size=64)
    charts.refresh()
    assert not charts._gpu_marker.visible
    assert "NVML" not in charts.figures["utilization"].title.text
    log.scalar("gpu_utilization", 3, 40.0, 3.0, device="/task:1")
    log.scalar("gpu_memory_used", 3, 2**30, 3.0, device="/task:1")
    charts.refresh()
    assert charts._gpu_marker.visible and "NVML" in charts.figures["utilization"].title.text


def test_only_the_figures_asked_for_are_built_and_every_source_is_fed():
    from workbench.charts.live_charts import LiveCharts

    charts = LiveCharts(_two_devices(), batch_size=64, figure_names=("timeline",))
    charts.refresh()
    assert list(charts.figures) == ["timeline"]
    assert len(charts.sources["timeline"].data["phase"]) == 12
    assert list(charts.sources["loss"].data["loss"]) == [2.0, 1.0, 0.0]
    assert charts.sources["loss"].name == "loss"
    with pytest.raises(ValueError, match=r"figure_names.*gantt"):
        LiveCharts(EventLog(), batch_size=1, figure_names=("gantt",))
