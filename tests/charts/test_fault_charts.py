"""Fault events on the live charts: failures, recoveries and dropped pushes reach timeline
sources of their own, drawn in their own colours with their own legend entries, and the
utilization and straggler views do not take them for work."""

from __future__ import annotations

import pytest
from bokeh.models import GlyphRenderer, HoverTool, Scatter, Segment

from tests.fault_events import DEVICES, DROPPED, FAILURE, NOTICED, RESUMED, fault_run
from workbench.charts.chart_data import ChartFeed
from workbench.charts.live_charts import FAULT_COLOURS, PHASE_COLOURS, LiveCharts
from workbench.events import EventLog


def _log(events) -> EventLog:
    log = EventLog()
    for event in events:
        log.emit(event)
    return log


def test_fault_phases_stream_to_their_own_timelines_and_ordinary_ones_stay():
    appended = ChartFeed(_log(fault_run()), batch_size=32).update().appended
    assert set(appended["timeline"]["phase"]) == {"compute", "allreduce"}
    assert len(appended["timeline"]["phase"]) == 5 * 2 * 2
    failures = appended["failures"]
    assert (failures["device"], failures["step"]) == ([FAILURE.device], [3])
    assert failures["start"] == failures["end"] == [NOTICED]
    assert appended["recoveries"]["device"] == list(DEVICES)
    assert appended["recoveries"]["end"] == [RESUMED, RESUMED]
    assert appended["dropped"]["bytes"] == [DROPPED.bytes]


def test_a_recovery_is_neither_compute_nor_communication():
    log = EventLog()
    log.phase("/task:0", "compute", 0, 0.0, 1.0)
    log.phase("/task:0", "failure", 1, 1.0, 1.0)
    log.phase("/task:0", "recovery", 0, 1.0, 4.0)  # 3 of the 4 s: restoring
    log.phase("/task:0", "dropped", 0, 3.0, 4.0, 10)
    usage = ChartFeed(log, batch_size=1).update().replaced["utilization"]
    assert usage["compute"] == pytest.approx([0.25])
    assert usage["communication"] == pytest.approx([0.0])
    assert usage["idle"] == pytest.approx([0.75])


def test_an_idle_phase_counts_as_idle_as_in_the_run_summary():
    log = EventLog()
    log.phase("/task:0", "update", 0, 0.0, 1.0)
    log.phase("/task:0", "idle", 0, 1.0, 2.0)
    usage = ChartFeed(log, batch_size=1).update().replaced["utilization"]
    assert usage["compute"] == pytest.approx([0.5]) and usage["idle"] == pytest.approx([0.5])


def test_a_restore_does_not_pass_for_a_slow_step():
    stragglers = ChartFeed(_log(fault_run()), batch_size=32).update().replaced["stragglers"]
    # Steps are 0.8 s on both devices; step 3's recovery (2 s) and failure are not step time.
    assert stragglers["max"] == pytest.approx([0.8, 0.8])


def test_a_feed_that_has_seen_only_a_failure_still_draws_its_tables():
    update = ChartFeed(_log([FAILURE]), batch_size=32).update()
    assert update.replaced["stragglers"]["device"] == [FAILURE.device]
    assert update.appended["failures"]["step"] == [3]


def _timeline_renderers(charts: LiveCharts) -> dict[str, list[GlyphRenderer]]:
    by_source: dict[str, list[GlyphRenderer]] = {}
    for renderer in charts.figures["timeline"].renderers:
        by_source.setdefault(renderer.data_source.name, []).append(renderer)
    return by_source


def test_the_timeline_draws_each_fault_its_own_way():
    charts = LiveCharts(_log(fault_run()), batch_size=32)
    charts.refresh()
    assert list(charts.sources["failures"].data["device"]) == [FAILURE.device]
    assert len(charts.sources["recoveries"].data["phase"]) == 2
    assert list(charts.sources["dropped"].data["step"]) == [4]
    drawn = _timeline_renderers(charts)
    line, marker = drawn["failures"]
    assert isinstance(line.glyph, Segment) and line.glyph.line_color == FAULT_COLOURS["failure"]
    assert isinstance(marker.glyph, Scatter) and marker.glyph.marker == "inverted_triangle"
    assert marker.glyph.fill_color == FAULT_COLOURS["failure"]
    (recovery,) = drawn["recoveries"]
    assert recovery.glyph.hatch_pattern == "/"
    assert recovery.glyph.fill_color == FAULT_COLOURS["recovery"]
    (dropped,) = drawn["dropped"]
    assert dropped.glyph.fill_color == FAULT_COLOURS["dropped"]
    # Under everything else: the restore spans the rows the steps after it are drawn on.
    assert charts.figures["timeline"].renderers[0] is recovery
    assert not set(FAULT_COLOURS.values()) & set(PHASE_COLOURS.values())


def test_each_fault_has_a_legend_entry_of_its_own_listing_what_its_source_holds():
    charts = LiveCharts(EventLog(), batch_size=32)
    legend = charts.figures["timeline"].legend[0]
    drawn = _timeline_renderers(charts)
    by_source = {
        item.renderers[0].data_source.name: item for item in legend.items if item.renderers
    }
    assert set(by_source) == {"timeline", "failures", "recoveries", "dropped", "actions"}
    for name, item in by_source.items():
        # A field label: an entry per phase the source holds, none for a run without faults
        # (a pipeline's actions: an entry per kind).
        assert item.label.field == ("legend" if name == "actions" else "phase")
        # The actions' bars, not the labels written on them.
        assert item.renderers == (drawn[name][:1] if name == "actions" else drawn[name])


def test_the_timeline_hover_covers_the_faults():
    charts = LiveCharts(EventLog(), batch_size=32)
    tools = charts.figures["timeline"].tools
    hovers = [tool for tool in tools if isinstance(tool, HoverTool)]
    # The phases' hover; a pipeline's actions have one of their own.
    (hover,) = [tool for tool in hovers if tool.renderers[0].data_source.name == "timeline"]
    hovered = {renderer.data_source.name for renderer in hover.renderers}
    assert hovered == {"timeline", "failures", "recoveries", "dropped"}
