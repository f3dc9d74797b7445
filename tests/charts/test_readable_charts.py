"""The live charts read well at any run length: both axes labelled, a small toolbar that hides
until the pointer is over it, legends outside the data, compute and update in different hues,
a traffic axis from 0 that says "no traffic" for a failed run, and a long run's timeline as
per-interval phase shares next to the detail of its last steps."""

from __future__ import annotations

import colorsys
import importlib
from collections import defaultdict

import pytest
from bokeh.models import CustomJSFilter, Legend

from workbench.charts import live_charts
from workbench.charts.live_charts import PHASE_COLOURS, LiveCharts
from workbench.events import EventLog
from workbench.server.run_charts import page_figures

DEVICES = ("/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0")
STEP_S = 0.01


def _run(steps: int) -> EventLog:
    """A mirrored run: per step and device compute, all-reduce, update (60/30/10 %)."""
    log = EventLog()
    for step in range(steps):
        start = step * STEP_S
        for device in DEVICES:
            log.phase(device, "compute", step, start, start + 0.006)
            log.phase(device, "allreduce", step, start + 0.006, start + 0.009, 400, 400)
            log.phase(device, "update", step, start + 0.009, start + 0.010)
        log.scalar("loss", step, 1.0 / (step + 1), start + STEP_S)
    return log


@pytest.fixture(scope="module")
def charts() -> LiveCharts:
    charts = LiveCharts(_run(20), batch_size=32)
    charts.refresh()
    return charts


def test_every_chart_labels_both_axes(charts):
    for name, chart in charts.figures.items():
        assert chart.xaxis[0].axis_label, f"{name}: no x-axis label"
        assert chart.yaxis[0].axis_label, f"{name}: no y-axis label"


def test_toolbars_are_small_and_hide_until_pointed_at(charts):
    for name, chart in charts.figures.items():
        shown = [tool for tool in chart.toolbar.tools if tool.visible]
        assert len(shown) <= 3, f"{name}: {[type(tool).__name__ for tool in shown]}"
        assert chart.toolbar.autohide, name


def test_legends_sit_outside_the_data(charts):
    with_legend = 0
    for name, chart in charts.figures.items():
        assert not [item for item in chart.center if isinstance(item, Legend)], name
        with_legend += any(isinstance(item, Legend) for item in chart.below + chart.right)
    assert with_legend >= 5  # loss, utilization, traffic, phase shares, timeline


def _hue(colour: str) -> float:
    red, green, blue = (int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5))
    return colorsys.rgb_to_hsv(red, green, blue)[0] * 360


def test_compute_and_update_differ_in_hue():
    gap = abs(_hue(PHASE_COLOURS["compute"]) - _hue(PHASE_COLOURS["update"]))
    assert min(gap, 360 - gap) >= 45


def test_a_run_without_traffic_has_an_axis_from_zero_saying_so():
    log = EventLog()
    for device in DEVICES:  # failed in its first step, before any byte moved
        log.phase(device, "compute", 0, 0.0, 0.05)
    charts = LiveCharts(log, batch_size=32, figure_names=("traffic",))
    charts.refresh()
    assert charts.figures["traffic"].x_range.start == 0
    notes = charts.sources["traffic_notes"].data
    assert list(notes["device"]) == list(DEVICES)
    assert list(notes["note"]) == ["no traffic", "no traffic"]
    assert "traffic_notes" in {r.data_source.name for r in charts.figures["traffic"].renderers}


def _max_intervals() -> int:
    return importlib.import_module("workbench.charts.phase_shares").MAX_INTERVALS


def test_a_long_run_aggregates_into_phase_shares_beside_its_last_steps():
    steps = 2000
    charts = LiveCharts(_run(steps), batch_size=32, figure_names=("phases", "timeline"))
    charts.refresh()
    shares = charts.sources["phase_shares"].data
    assert 0 < len(shares["phase"]) <= len(DEVICES) * _max_intervals() * 3
    # Each interval's shares add up to the busy part of it (all of it here) ...
    per_interval: dict[tuple, float] = defaultdict(float)
    for device, start, share in zip(
        shares["device"], shares["interval_start"], shares["share"], strict=True
    ):
        per_interval[(device, start)] += share
    assert max(per_interval.values()) <= 1 + 1e-9
    # ... and each phase keeps its share of the run.
    by_phase: dict[str, float] = defaultdict(float)
    columns = (shares[name] for name in ("phase", "share", "interval_start", "interval_end"))
    for phase, share, start, end in zip(*columns, strict=True):
        by_phase[phase] += share * (end - start)
    total = sum(by_phase.values())
    assert by_phase["compute"] / total == pytest.approx(0.6, abs=0.01)
    assert by_phase["update"] / total == pytest.approx(0.1, abs=0.01)
    # The detailed timeline draws the newest DETAIL_STEPS steps of the rows it holds.
    bars = charts.figures["timeline"].renderers[1]
    assert bars.data_source.name == "timeline"
    assert isinstance(bars.view.filter, CustomJSFilter)
    assert bars.view.filter.args["keep"] == live_charts.DETAIL_STEPS
    assert page_figures("timeline") == ("phases", "timeline")


def test_merging_intervals_keeps_every_second():
    module = importlib.import_module("workbench.charts.phase_shares")
    shares = module.PhaseShares(first_interval=0.001)
    for index in range(1000):  # 1 s of 1 ms phases, straddling interval edges
        shares.add("d", "compute", index * 0.001 + 0.0004, index * 0.001 + 0.0009)
    table = shares.table(["compute"])
    assert len(table["share"]) <= module.MAX_INTERVALS
    widths = [
        end - start
        for start, end in zip(*(table["interval_start"], table["interval_end"]), strict=True)
    ]
    assert sum(share * width for share, width in zip(table["share"], widths, strict=True)) == (
        pytest.approx(0.5)
    )
    # Stacked in the device's row: each bar starts where the one below ended.
    assert table["bottom"][0] == ["d", -0.4]


def test_a_large_batch_sends_the_timeline_only_the_steps_it_draws():
    # A refresh that backed off (or a chart tab's first read) gets many steps at once; a
    # browser handed all their rows stalls, though it draws only the newest DETAIL_STEPS.
    steps = live_charts.DETAIL_STEPS * 3
    charts = LiveCharts(_run(steps), batch_size=32)
    charts.refresh()
    timeline = charts.sources["timeline"].data
    assert min(timeline["step"]) == steps - live_charts.DETAIL_STEPS
    assert len(timeline["step"]) == live_charts.DETAIL_STEPS * len(DEVICES) * 3
    assert list(charts.sources["loss"].data["step"]) == list(range(steps))  # every step
