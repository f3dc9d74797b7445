"""The memory charts: each device's measured peak over the steps (a line per device, in its
own colour) beside the split of its last report by category, updated as reports arrive, the
final figures of a finished run, and the run's predicted peak dashed only where the run has a
prediction; in the notebook panel's layout and on a dashboard page of their own."""

from __future__ import annotations

from types import SimpleNamespace

from bokeh.document import Document
from bokeh.models import HSpan, Segment

from tests.notebook.test_panel_live import StandInRun
from workbench.charts.live_charts import BYTES_JS, FIGURE_NAMES, LiveCharts
from workbench.charts.memory_data import CATEGORIES, PREDICTED_LABEL
from workbench.dashboard.pages import show_page
from workbench.dashboard.preload import PAGE_FIGURES
from workbench.dashboard.run_board import RunBoard
from workbench.dashboard.wire_rows import event_rows
from workbench.events import EventLog
from workbench.events.memory_summary import memory_scalars
from workbench.events.records import ScalarEvent
from workbench.ir.memory import CATEGORIES as LEDGER_CATEGORIES
from workbench.notebook.panel import RunPanel, predicted_memory

DEVICES = ("/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0")
MIB = 1 << 20


def _report(device: int, step: int) -> list[ScalarEvent]:
    """One report of ``DEVICES[device]``: parameters and optimizer resident, activations
    growing with the step, so each report differs."""
    at_peak = {
        "parameters": 2 * MIB,
        "optimizer": 2 * MIB,
        "gradients": MIB,
        "activations": (device + 1) * MIB + step * 1024,
        "communication": 0,
    }
    scalars = memory_scalars(
        DEVICES[device], step, sum(at_peak.values()), at_peak, at_peak, 64 * MIB, None
    )
    return [
        ScalarEvent(name, step, value, 0.1 * step, where) for name, step, value, where in scalars
    ]


def _log(steps: tuple[int, ...]) -> EventLog:
    log = EventLog()
    for step in steps:
        for device in (0, 1):
            for event in _report(device, step):
                log.emit(event)
    return log


def _peak(device: int, step: int) -> float:
    return 5 * MIB + (device + 1) * MIB + step * 1024


def _rows(charts: LiveCharts, device: str) -> list[tuple]:
    data = charts.sources["memory"].data
    columns = (data[name] for name in ("device", "step0", "peak0", "step", "peak_bytes", "colour"))
    return [row[1:] for row in zip(*columns, strict=True) if row[0] == device]


def test_a_line_per_device_in_its_own_colour_and_the_split_of_the_last_report():
    charts = LiveCharts(_log((0, 20, 40)), batch_size=32, figure_names=("memory", "memory_split"))
    charts.refresh()
    for index, device in enumerate(DEVICES):
        rows = _rows(charts, device)
        # Each report is a segment from the device's previous report (the first starts there).
        assert [row[:4] for row in rows] == [
            (0, _peak(index, 0), 0, _peak(index, 0)),
            (0, _peak(index, 0), 20, _peak(index, 20)),
            (20, _peak(index, 20), 40, _peak(index, 40)),
        ]
        assert len({row[4] for row in rows}) == 1  # one colour per device
    assert _rows(charts, DEVICES[0])[0][4] != _rows(charts, DEVICES[1])[0][4]
    split = charts.sources["memory_split"].data
    assert split["device"] == list(DEVICES) and split["step"] == [40, 40]
    assert split["peak_bytes"] == [_peak(0, 40), _peak(1, 40)]
    assert split["activations"] == [MIB + 40 * 1024, 2 * MIB + 40 * 1024]
    assert split["parameters"] == [2 * MIB, 2 * MIB] and split["communication"] == [0, 0]
    for index in (0, 1):  # the stacked bars add up to the peak
        assert sum(split[name][index] for name in CATEGORIES) == split["peak_bytes"][index]
    assert charts.figures["memory_split"].y_range.factors == list(reversed(DEVICES))


def test_the_charts_follow_reports_as_they_arrive():
    log = _log((0,))
    charts = LiveCharts(log, batch_size=32, figure_names=("memory", "memory_split"))
    charts.refresh()
    assert list(charts.sources["memory"].data["step"]) == [0, 0]
    for event in _report(1, 20):  # one device reports before the other
        log.emit(event)
    charts.refresh()
    assert list(charts.sources["memory"].data["step"]) == [0, 0, 20]
    assert charts.sources["memory_split"].data["step"] == [0, 20]
    for event in _report(0, 20):
        log.emit(event)
    charts.refresh()
    assert _rows(charts, DEVICES[0])[-1][:4] == (0, _peak(0, 0), 20, _peak(0, 20))
    assert charts.sources["memory_split"].data["peak_bytes"] == [_peak(0, 20), _peak(1, 20)]


def test_the_predicted_peak_shows_only_for_a_run_with_a_prediction():
    charts = LiveCharts(_log((0, 20)), batch_size=32)
    charts.refresh()
    predicted = charts.sources["memory_predicted"]
    drawn_from = {
        name: [r for r in charts.figures[name].renderers if r.data_source is predicted]
        for name in ("memory", "memory_split")
    }
    assert isinstance(drawn_from["memory"][0].glyph, HSpan)  # a dashed level per device
    assert isinstance(drawn_from["memory_split"][0].glyph, Segment)  # a dashed tick per bar
    assert all(r.glyph.line_dash == "dashed" for rs in drawn_from.values() for r in rs)
    assert predicted.data["device"] == []  # no prediction: nothing drawn, no legend entry
    totals = {DEVICES[0]: 9 * MIB, DEVICES[1]: 10 * MIB}
    charts.show_predicted_memory(totals)
    assert predicted.data["device"] == list(DEVICES)
    assert predicted.data["predicted_bytes"] == [9 * MIB, 10 * MIB]
    assert set(predicted.data["kind"]) == {PREDICTED_LABEL}
    colours = charts.sources["memory_split"].data["colour"]
    assert predicted.data["colour"] == colours  # each device's line colour


def test_a_finished_run_shows_its_last_figures_and_reads_well():
    finished = _log(tuple(range(0, 200, 20)))
    charts = LiveCharts(finished, batch_size=32)
    charts.refresh()
    split = charts.sources["memory_split"].data
    assert split["step"] == [180, 180] and split["peak_bytes"] == [_peak(0, 180), _peak(1, 180)]
    assert len(charts.sources["memory"].data["step"]) == 20
    assert {"memory", "memory_split"} <= set(FIGURE_NAMES) and set(charts.figures) == set(
        FIGURE_NAMES
    )
    line, split_chart = charts.figures["memory"], charts.figures["memory_split"]
    assert "memory" in line.title.text and "by category" in split_chart.title.text
    for axis in (line.yaxis[0], split_chart.xaxis[0]):  # binary steps, named units
        assert axis.formatter.code == BYTES_JS and axis.ticker.base == 2
    labels = {getattr(item.label, "value", None) for item in split_chart.legend[0].items}
    assert set(CATEGORIES) <= labels
    assert CATEGORIES == LEDGER_CATEGORIES


def test_the_dashboard_has_a_memory_page():
    board = RunBoard()
    page = show_page(PAGE_FIGURES["/individual-workbench-memory"], board, Document())
    assert list(page.charts.figures) == ["memory", "memory_split"]
    events = event_rows(_log((0, 20)).events)
    board.publish("run-1", events, {"strategy": "mirrored", "devices": list(DEVICES)})
    page.tick()
    assert page.charts.sources["memory_split"].data["step"] == [20, 20]
    assert len(page.charts.sources["memory"].data["step"]) == 4


def _ended_run(prediction: SimpleNamespace | None) -> StandInRun:
    return StandInRun(
        log=_log((0, 20)),
        done=True,
        state="finished",
        result=SimpleNamespace(prediction=prediction),
    )


def test_the_panel_draws_the_prediction_of_an_ended_run_that_has_one():
    memory = {device: SimpleNamespace(total=7 * MIB, by_category={}) for device in DEVICES}
    panel = RunPanel(_ended_run(SimpleNamespace(memory_bytes=memory)))
    panel.updater.join(10)  # a done run: one refresh, then it stops
    sources = panel.charts.sources
    assert sources["memory_split"].data["step"] == [20, 20]
    assert sources["memory_predicted"].data["predicted_bytes"] == [7 * MIB, 7 * MIB]
    bare = RunPanel(_ended_run(None))  # no calibration: no prediction, nothing dashed
    bare.updater.join(10)
    assert bare.charts.sources["memory_split"].data["step"] == [20, 20]
    assert bare.charts.sources["memory_predicted"].data["device"] == []
    assert predicted_memory(StandInRun()) == {}  # a run still training has no result
