"""``%dtrain plan``'s result in a notebook: the what-if table as HTML (and its rows as dicts,
for a DataFrame or a chart), the ranked configurations as a chart (:meth:`WhatIfTable.chart`,
:func:`ranking_chart`), and predicted against measured steps as a chart."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from workbench.launch.what_if import WhatIfPlan
from workbench.planner.what_if import (
    WhatIfRow,
    describe_options,
    format_table,
    left_out_summary,
    megabytes,
    memory_summary,
    top_rows,
)

COLUMNS = (
    ("rank", "rank"),
    ("strategy", "strategy"),
    ("options", "options"),
    ("predicted_step_ms", "step ms"),
    ("samples_per_second", "samples/s"),
    ("bytes_per_device", "MB sent / device"),
    ("memory_per_device", "peak MB / device"),
    ("memory_device", "peak on"),
    ("fits", "fits"),
    ("bubble", "bubble"),
    ("reason", "loses by"),
    ("versus_above", "vs the row above"),
)
# One bar's band: a configuration's two bars with their label readable beside them.
BAR_ROW_PIXELS = 44
CHART_MARGIN_PIXELS = 90  # title, x axis and its label
# The ranking chart: one bar a configuration, the best K in colour.
RANK_ROW_PIXELS = 22
RANKED_SHOWN = 40  # configurations the ranking chart draws at most
HIGHLIGHT, OTHERS, MEMORY = "#1f77b4", "#c7c7c7", "#2ca02c"


class WhatIfTable:
    """The ranked predictions; ``rows`` are ``dtrain plan --what-if --json``'s
    configurations."""

    def __init__(self, plan: WhatIfPlan) -> None:
        self.source = plan.source
        self.memory = memory_summary(plan.rows, plan.memory_capacity)
        # Whether each row fits says something only against a memory size.
        self.columns = [column for column in COLUMNS if column[0] != "fits" or plan.memory_capacity]
        self.top = plan.top
        self.ranked = [row for row in plan.rows if row.rank is not None]
        shown = top_rows(plan.rows, plan.top)  # --what-if-top K: the best K
        self.left_out = left_out_summary(plan.rows, shown, plan.pruned)
        self.rows = [row.to_dict() for row in shown]
        # Named as the CLI's table names them (every option, compression included).
        self.options = [describe_options(row.options) for row in shown]
        self._text = format_table(shown)

    def chart(self, limit: int = RANKED_SHOWN):
        """The ranked configurations as bars (:func:`ranking_chart`), the best
        ``--what-if-top`` K highlighted (the fastest when not given)."""
        return ranking_chart(self.ranked, self.top or 1, limit)

    def _cell(self, index: int, key: str) -> str:
        row = self.rows[index]
        if key == "options":
            return self.options[index]
        value = row.get(key)
        if key == "fits":
            return "-" if value is None else "yes" if value else "NO"
        if value is None:
            return "-"
        if key == "memory_per_device":
            return megabytes(value)
        if key == "bytes_per_device":
            return f"{value / 1e6:,.2f}"
        if key == "samples_per_second":
            return f"{value:,.0f}"
        if key == "rank":
            return str(value)
        if key in ("predicted_step_ms", "bubble"):
            return f"{value:.3f}" if key == "predicted_step_ms" else f"{value:.2f}"
        return str(value)

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{escape(title)}</th>" for _, title in self.columns)
        body = "".join(
            "<tr>"
            + "".join(f"<td>{escape(self._cell(index, key))}</td>" for key, _ in self.columns)
            + "</tr>"
            for index in range(len(self.rows))
        )
        return (
            f"<p>what if: {escape(self.source)}</p><p>{escape(self.memory)}</p>"
            f"<p>{escape(self.left_out)}</p>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
        )

    def __repr__(self) -> str:
        return f"what if: {self.source}\n{self.memory}\n{self.left_out}\n{self._text}"


def prediction_chart(
    results: Sequence[tuple[str, float | None, float | None]],
    title: str = "step time: predicted and measured",
):
    """Horizontal bars of each ``(configuration, predicted ms, measured ms)``: the names
    read on the y axis however long, the first on top, the chart as tall as its rows."""
    # Imported here: loading the magics (which show the table) stays free of Bokeh's cost.
    from bokeh.models import ColumnDataSource, FactorRange
    from bokeh.plotting import figure

    names = [name for name, _, _ in results]
    kinds = ("predicted", "measured")
    factors = [(name, kind) for name in reversed(names) for kind in reversed(kinds)]
    by_name = {name: dict(zip(kinds, values)) for name, *values in results}
    source = ColumnDataSource(
        {
            "y": factors,
            "ms": [by_name[name][kind] or 0.0 for name, kind in factors],
            "color": ["#1f77b4" if kind == "predicted" else "#ff7f0e" for _, kind in factors],
        }
    )
    chart = figure(
        y_range=FactorRange(*factors),
        height=CHART_MARGIN_PIXELS + BAR_ROW_PIXELS * len(results),
        width=820,
        title=title,
        x_axis_label="step time (ms)",
        toolbar_location=None,
    )
    # Each bar is named on the y axis (configuration, then predicted or measured): no legend
    # to cover the bars.
    chart.hbar(y="y", right="ms", height=0.8, color="color", source=source)
    chart.x_range.start = 0
    chart.yaxis.group_label_orientation = "horizontal"
    return chart


def ranking_chart(rows: Sequence[WhatIfRow], top: int = 1, limit: int = RANKED_SHOWN):
    """The ranked configurations (``rows`` as ranked, the first ``limit`` of them) as
    horizontal bars of predicted step time, best on top, the best ``top`` in colour; beside
    it, on the same rows, each configuration's predicted peak memory per device."""
    # Imported here: loading the magics (which show the table) stays free of Bokeh's cost.
    from bokeh.layouts import row as side_by_side
    from bokeh.models import ColumnDataSource, FactorRange
    from bokeh.plotting import figure

    ranked = [row for row in rows if row.prediction is not None][:limit]
    predictions = [row.prediction for row in ranked if row.prediction is not None]
    names = [f"{row.rank}. {row.strategy} {describe_options(row.options)}" for row in ranked]
    source = ColumnDataSource(
        {
            "y": names,
            "ms": [prediction.step_seconds * 1e3 for prediction in predictions],
            "mb": [prediction.largest_memory()[1].total / 1e6 for prediction in predictions],
            "color": [HIGHLIGHT if index < top else OTHERS for index in range(len(ranked))],
            "reason": [row.reason for row in ranked],
        }
    )
    y_range = FactorRange(*reversed(names))  # the best on top
    height = CHART_MARGIN_PIXELS + RANK_ROW_PIXELS * max(1, len(ranked))
    steps = figure(
        y_range=y_range,
        height=height,
        width=1000,
        title=f"predicted step, ranked: the best {top} highlighted",
        x_axis_label="step time (ms)",
        toolbar_location=None,
        tooltips=[("step", "@ms{0.000} ms"), ("loses by", "@reason")],
    )
    steps.hbar(y="y", right="ms", height=0.8, color="color", source=source)
    steps.x_range.start = 0
    memory = figure(
        y_range=y_range,
        height=height,
        width=260,
        title="peak memory per device",
        x_axis_label="MB",
        toolbar_location=None,
    )
    memory.hbar(y="y", right="mb", height=0.8, color=MEMORY, source=source)
    memory.x_range.start = 0
    memory.yaxis.visible = False
    return side_by_side(steps, memory)
