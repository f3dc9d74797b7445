"""A pipeline stage's computes on every timeline: each bar takes the kind of the schedule's
action it ran (forward, backward, input gradient, weight gradient), that kind's colour (chunks
in shades of it), a legend entry and its words on hovering; the action survives the run store,
the server's chart JSON, the dashboard's board and the Chrome trace, and the predicted step
beside the measured one colours them too; a run without actions draws what it always drew."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from bokeh.models import CustomJSFilter, GlyphRenderer, HBar, HoverTool, IntersectionFilter, Text

from workbench.charts import live_charts
from workbench.charts.chart_data import ChartFeed
from workbench.charts.live_charts import FAULT_COLOURS, PHASE_COLOURS, TIMELINE_COLUMNS, LiveCharts
from workbench.charts.step_comparison import step_comparison
from workbench.dashboard.pages import RunPage
from workbench.dashboard.run_board import RunBoard
from workbench.dashboard.wire_rows import event_rows
from workbench.events import EventLog
from workbench.events.records import Phase, PhaseEvent, ScalarEvent
from workbench.notebook.step_view import measured_rows, predicted_rows
from workbench.server.manager import RunsManager
from workbench.simulate.timeline import Interval
from workbench.store import RunStore
from workbench.store.exports import chrome_trace

STAGES = ("/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0")
LENGTH = {"F": 0.01, "B": 0.02, "I": 0.01, "W": 0.01}  # seconds per action kind


def _stage(device: str, step: int, actions: list[str], start: float) -> list[PhaseEvent]:
    """A stage's step: each action a compute, a send after each (the hand-off to the next
    stage), then the update."""
    events, clock = [], start
    for action in actions:
        end = clock + LENGTH[action[0]]
        events.append(PhaseEvent(device, "compute", step, clock, end, action=action))
        events.append(PhaseEvent(device, "send", step, end, end + 0.001, 512, 0, "tcp"))
        clock = end + 0.001
    events.append(PhaseEvent(device, "update", step, clock, clock + 0.002))
    return events


def gpipe_like(steps: int = 2) -> list[PhaseEvent]:
    """Two stages, two micro-batches: all forwards, then the backwards in reverse."""
    return [
        event
        for step in range(steps)
        for stage, device in enumerate(STAGES)
        for event in _stage(device, step, ["F0", "F1", "B1", "B0"], 0.1 * step + 0.01 * stage)
    ]


def zero_bubble_like() -> list[PhaseEvent]:
    """One step of split backwards, the second micro-batch on model chunk 1 (as a device that
    holds two chunks runs it)."""
    actions = ["F0", "F1@1", "I0", "I1@1", "W0", "W1@1"]
    return [e for stage, d in enumerate(STAGES) for e in _stage(d, 0, actions, 0.01 * stage)]


def data_parallel_like() -> list[PhaseEvent | ScalarEvent]:
    events: list[PhaseEvent | ScalarEvent] = []
    for step in range(2):
        for device in STAGES:
            events.append(PhaseEvent(device, "compute", step, step, step + 0.5))
            events.append(PhaseEvent(device, "allreduce", step, step + 0.5, step + 0.6, 8, 8))
        events.append(ScalarEvent("loss", step, 1.0, step + 0.6))
    return events


def kind_shades() -> dict[str, tuple[str, ...]]:
    """Each kind's shades (imported here: each test, not the file, fails where there are none)."""
    from workbench.charts.pipeline_actions import KIND_SHADES

    return KIND_SHADES


def _log(events) -> EventLog:
    log = EventLog()
    for event in events:
        log.emit(event)
    return log


def test_gpipe_computes_take_their_kind_colour_and_words():
    appended = ChartFeed(_log(gpipe_like()), batch_size=32).update().appended
    actions = appended["actions"]
    assert actions["action"][:4] == ["F0", "F1", "B1", "B0"]
    assert actions["kind"][:4] == ["forward", "forward", "backward", "backward"]
    assert actions["microbatch"][:4] == [0, 1, 1, 0]
    forward, backward = kind_shades()["forward"][0], kind_shades()["backward"][0]
    assert actions["colour"][:4] == [forward, forward, backward, backward]
    assert actions["detail"][2] == "backward of micro-batch 1"
    assert set(actions["legend"]) == {"forward", "backward"}
    assert len(actions["action"]) == 2 * 2 * 4  # steps x stages x actions
    # The bar's label sits in its middle; its row is the ordinary timeline row.
    assert actions["middle"][0] == pytest.approx(0.005)
    assert actions["start"][0] == 0.0 and actions["device"][0] == STAGES[0]
    # Sends and updates stay on the ordinary timeline; every compute moved to the actions.
    assert set(appended["timeline"]["phase"]) == {"send", "update"}


def test_split_backwards_and_model_chunks_are_told_apart():
    actions = ChartFeed(_log(zero_bubble_like()), batch_size=32).update().appended["actions"]
    assert actions["kind"][:6] == [
        "forward",
        "forward",
        "input gradient",
        "input gradient",
        "weight gradient",
        "weight gradient",
    ]
    assert actions["chunk"][:6] == [0, 1, 0, 1, 0, 1]
    for kind, chunk, colour in zip(actions["kind"], actions["chunk"], actions["colour"]):
        assert colour == kind_shades()[kind][chunk]  # the kind's family, a shade per chunk
    assert actions["legend"][:2] == ["forward", "forward, chunk 1"]
    assert actions["detail"][5] == "weight gradient of micro-batch 1 on model chunk 1"
    # No kind's colour is another phase's or a fault's (forward keeps the compute green).
    taken = {*PHASE_COLOURS.values(), *FAULT_COLOURS.values()} - {PHASE_COLOURS[Phase.COMPUTE]}
    assert not taken & {shade for shades in kind_shades().values() for shade in shades}


def test_a_run_without_actions_draws_its_timeline_as_before():
    charts = LiveCharts(_log(data_parallel_like()), batch_size=32)
    update = charts.feed.update()
    assert "actions" not in update.appended
    assert list(update.appended["timeline"]) == TIMELINE_COLUMNS
    assert update.appended["timeline"]["phase"] == ["compute", "allreduce"] * 4
    charts = LiveCharts(_log(data_parallel_like()), batch_size=32)
    charts.refresh()
    assert len(charts.sources["actions"].data["action"]) == 0  # nothing drawn, no legend entry
    assert len(charts.sources["timeline"].data["phase"]) == 8


def _renderers_of(charts: LiveCharts, source: str) -> list[GlyphRenderer]:
    return [
        renderer
        for renderer in charts.figures["timeline"].renderers
        if renderer.data_source.name == source
    ]


def test_the_timeline_figure_colours_labels_and_explains_each_action():
    charts = LiveCharts(_log(zero_bubble_like()), batch_size=32)
    charts.refresh()
    chart = charts.figures["timeline"]
    bars, labels = _renderers_of(charts, "actions")
    assert isinstance(bars.glyph, HBar) and bars.glyph.fill_color == "colour"
    assert isinstance(labels.glyph, Text) and labels.glyph.text == "action"
    # A label only where its bar is wide enough at the zoom of the moment, re-checked on zoom.
    assert isinstance(labels.view.filter, IntersectionFilter)
    (wide,) = [f for f in labels.view.filter.operands if f.code == live_charts.WIDE_ENOUGH_JS]
    assert isinstance(wide, CustomJSFilter)
    assert chart.x_range.js_property_callbacks.keys() >= {"change:start", "change:end"}
    (hover,) = [
        tool for tool in chart.tools if isinstance(tool, HoverTool) and bars in tool.renderers
    ]
    assert ("action", "@action: @detail") in hover.tooltips
    legend_fields = [item.label.field for item in chart.legend[0].items if item.renderers == [bars]]
    assert legend_fields == ["legend"]
    assert list(charts.sources["actions"].data["legend"]).count("weight gradient, chunk 1") == 2


def test_the_trace_names_each_stage_compute_by_its_action():
    trace = chrome_trace(zero_bubble_like()[:4])["traceEvents"]
    computes = [event for event in trace if event.get("cat") == "compute"]
    assert [event["name"] for event in computes] == ["F0", "F1@1"]
    assert computes[1]["args"]["action"] == "F1@1"
    send = next(event for event in trace if event.get("cat") == "send")
    assert send["name"] == "send" and "action" not in send["args"]
    plain = chrome_trace([PhaseEvent("/task:0", "compute", 0, 0.0, 1.0)])["traceEvents"][1]
    assert plain["name"] == "compute" and "action" not in plain["args"]


def test_the_action_survives_the_store_the_server_json_and_the_trace(tmp_path):
    store = RunStore(tmp_path / "runs")
    recorder = store.create("pipe", {"strategy": "pipeline", "batch_size": 32}, steps=2)
    for event in gpipe_like():
        recorder.record(event)
    recorder.finish("finished")
    stored = store.open("pipe").events()
    assert [event.action for event in stored][:3] == ["F0", "", "F1"]
    assert stored == gpipe_like()

    manager = RunsManager(store)
    columns = manager.chart_data("pipe", "timeline")["sources"]["actions"]
    assert columns["action"][:4] == ["F0", "F1", "B1", "B0"]
    assert columns["colour"][2] == kind_shades()["backward"][0]
    names = [e["name"] for e in json.loads(manager.trace("pipe"))["traceEvents"] if "dur" in e]
    assert names[:3] == ["F0", "send", "F1"]


def test_the_dashboard_page_draws_the_actions_it_is_published():
    board = RunBoard()
    board.publish("pipe", event_rows(zero_bubble_like()), {"batch_size": 8})
    page = RunPage(board, ("timeline", "stragglers"))
    page.tick()
    drawn = page.charts.sources["actions"].data
    assert list(drawn["action"][:6]) == ["F0", "F1@1", "I0", "I1@1", "W0", "W1@1"]
    assert list(drawn["kind"][2:3]) == ["input gradient"]


def test_the_predicted_and_measured_step_colour_a_pipeline_s_actions():
    _, measured = measured_rows(_log(zero_bubble_like()))
    predicted = predicted_rows(
        SimpleNamespace(
            timeline=SimpleNamespace(
                intervals=[
                    Interval(STAGES[0], "main", "compute", "B1@1", 0.0, 0.02, "compute"),
                    Interval(STAGES[0], "main", "send", "a0", 0.02, 0.03, "send"),
                ]
            )
        )
    )
    (bars,) = step_comparison([*predicted, *measured]).renderers
    data = bars.data_source.data
    assert bars.glyph.fill_color == "colour"
    assert data["action"][:2] == ["B1@1: backward of micro-batch 1 on model chunk 1", ""]
    assert data["colour"][:2] == [kind_shades()["backward"][1], PHASE_COLOURS["send"]]
    assert data["legend"][:3] == ["backward, chunk 1", "send", "forward"]
    # A step without actions: each phase in its colour, named by its phase, as always.
    (plain,) = step_comparison(measured_rows(_log(data_parallel_like()))[1]).renderers
    assert set(plain.data_source.data["legend"]) == {"compute", "allreduce"}
    assert plain.data_source.data["colour"][:2] == [
        PHASE_COLOURS["compute"],
        PHASE_COLOURS["allreduce"],
    ]
