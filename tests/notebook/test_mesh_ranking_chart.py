"""The notebook's what-if view with ``--what-if-top K``: the table shows the best K with their
ranks and what each loses to the row above, and the ranking chart draws every ranked
configuration best first, the best K highlighted, each one's peak memory beside it."""

from workbench.config import RunConfig
from workbench.launch.what_if import plan_what_if
from workbench.notebook.what_if_view import HIGHLIGHT, OTHERS, WhatIfTable
from workbench.planner.what_if import describe_options


def _table(top: int | None) -> WhatIfTable:
    config = RunConfig(dataset="synthetic:64:10:256", hidden=(16,), batch_size=64)
    return WhatIfTable(plan_what_if(config, "dgx-h100,hosts=1,gpus-per-host=4", print, top=top))


def test_the_table_shows_the_best_k_with_rank_and_what_each_loses_to_the_row_above():
    table = _table(3)
    assert [row["rank"] for row in table.rows] == [1, 2, 3]
    html = table._repr_html_()
    assert "<th>rank</th>" in html and "<th>vs the row above</th>" in html
    assert f"showing the best 3 of {len(table.ranked)} ranked" in html
    for row in table.rows[1:]:
        assert f"<td>{row['versus_above']}</td>" in html


def test_the_ranking_chart_draws_every_configuration_best_first_with_the_top_k_highlighted():
    table = _table(3)
    steps, memory = table.chart().children
    (bars,) = steps.renderers
    assert type(bars.glyph).__name__ == "HBar"
    data = bars.data_source.data
    ranked = table.ranked[: len(data["y"])]
    assert len(ranked) > 3
    # Best first: the first configuration is the top factor (Bokeh lists factors bottom up).
    assert steps.y_range.factors[-1] == data["y"][0]
    assert data["y"][0] == f"1. {ranked[0].strategy} {describe_options(ranked[0].options)}"
    assert data["ms"] == sorted(data["ms"])
    assert data["color"] == [HIGHLIGHT] * 3 + [OTHERS] * (len(ranked) - 3)
    # Memory beside it, on the same rows.
    (held,) = memory.renderers
    assert memory.y_range is steps.y_range
    assert held.data_source is bars.data_source
    assert all(megabytes > 0 for megabytes in data["mb"])
    assert steps.height >= 90 + 20 * len(ranked)


def test_without_top_every_row_is_shown_and_the_fastest_highlighted():
    table = _table(None)
    assert len(table.rows) >= len(table.ranked)
    data = table.chart(limit=5).children[0].renderers[0].data_source.data
    assert len(data["y"]) == 5 and data["color"] == [HIGHLIGHT] + [OTHERS] * 4
