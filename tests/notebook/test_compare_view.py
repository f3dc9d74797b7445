"""``%dtrain compare``'s view, on runs made of events (no training): the table comes first,
time counts from each run's first step, coinciding curves stay apart, and the legend is outside
the data."""

from __future__ import annotations

from types import SimpleNamespace

from bokeh.models import GlyphRenderer, Legend, Line, Scatter

from workbench.config import RunConfig
from workbench.events import EventLog
from workbench.notebook.compare_view import ComparisonView

STEPS = 24


def run_of(cluster_start: float) -> SimpleNamespace:
    """A finished run whose first step began ``cluster_start`` seconds after its job did; every
    step takes 0.5 s and every run has the same losses (as runs with one seed often do)."""
    log = EventLog()
    for step in range(STEPS):
        start = cluster_start + 0.5 * step
        log.phase("/task:0", "compute", step, start, start + 0.4)
        log.scalar("loss", step, 2.0 / (1 + step), start + 0.5)
    return SimpleNamespace(log=log, total_steps=STEPS)


def view_of(*cluster_starts: float) -> ComparisonView:
    configs = [RunConfig(strategy="mirrored", devices=2), RunConfig(strategy="parameter-server")]
    comparison = SimpleNamespace(
        configs=configs[: len(cluster_starts)],
        runs=[run_of(start) for start in cluster_starts],
        done=True,
        table_html=lambda: "<table><tr><th>strategy</th></tr></table>",
    )
    view = ComparisonView(comparison)
    view.updater.join(30)
    return view


def renderers(chart, glyph_type) -> list[GlyphRenderer]:
    return [r for r in chart.renderers if isinstance(r.glyph, glyph_type)]


def test_the_table_comes_before_the_charts():
    view = view_of(30.0)
    assert view.widget.children[0] is view.table
    assert "strategy" in view.table.value


def test_time_counts_from_each_runs_first_step_not_from_its_cluster_start():
    view = view_of(30.0, 4.0)
    for source in view.sources:
        times = list(source.data["time"])
        assert times[0] == 0.5 and times[-1] == 0.5 * STEPS  # the first step's end, the last's
    assert "first step" in view.figures["by_time"].xaxis[0].axis_label


def test_coinciding_runs_have_their_own_dash_and_markers_placed_apart():
    view = view_of(30.0, 30.0)
    for chart in view.figures.values():
        dashes = [tuple(r.glyph.line_dash) for r in renderers(chart, Line)]
        markers = [r.glyph.marker for r in renderers(chart, Scatter)]
        assert len(set(dashes)) == 2 and len(set(markers)) == 2
    first, second = (set(source.data["step"]) for source in view.marker_sources)
    assert first and second and not first & second  # both runs' markers show


def test_the_legend_is_beside_the_data_and_hides_a_run_on_click():
    view = view_of(30.0, 30.0)
    for chart in view.figures.values():
        (legend,) = [item for item in chart.right if isinstance(item, Legend)]
        assert not [item for item in chart.center if isinstance(item, Legend)]
        assert legend.click_policy == "hide"
        assert [item.label.value for item in legend.items] == ["1. mirrored", "2. parameter-server"]
        for item in legend.items:  # a click hides the run's line and its markers
            assert {type(r.glyph) for r in item.renderers} == {Line, Scatter}


def test_the_browsers_echo_of_streamed_rows_leaves_each_row_once():
    """The comparison streams its rows as the panel does: the browser's echo of a stream must
    not add them again to the document a reloaded page is drawn from."""
    from tests.notebook.test_panel_reload import browser_message

    view = view_of(0.0)
    source = view.sources[0]
    chart_view = view.widget.children[-1]
    rows = {name: list(map(float, column)) for name, column in source.data.items()}
    chart_view._handle_msg(
        browser_message(
            {
                "kind": "ColumnsStreamed",
                "model": {"id": source.id},
                "attr": "data",
                "data": {"type": "map", "entries": list(rows.items())},
                "rollover": None,
            }
        )
    )
    assert list(source.data["step"]) == list(range(STEPS))
