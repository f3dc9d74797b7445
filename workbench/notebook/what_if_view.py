"""``%dtrain plan``'s result in a notebook: the what-if table as HTML (and its rows as dicts,
for a DataFrame or a chart), and predicted against measured steps as a chart."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from workbench.launch.what_if import WhatIfPlan
from workbench.planner.what_if import (
    describe_options,
    format_table,
    megabytes,
    memory_summary,
)

COLUMNS = (
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
)
# One bar's band: a configuration's two bars with their label readable beside them.
BAR_ROW_PIXELS = 44
CHART_MARGIN_PIXELS = 90  # title, x axis and its label


class WhatIfTable:
    """The ranked predictions; ``rows`` are ``dtrain plan --what-if --json``'s
    configurations."""

    def __init__(self, plan: WhatIfPlan) -> None:
        self.source = plan.source
        self.memory = memory_summary(plan.rows, plan.memory_capacity)
        # Whether each row fits says something only against a memory size.
        self.columns = [column for column in COLUMNS if column[0] != "fits" or plan.memory_capacity]
        self.rows = [row.to_dict() for row in plan.rows]
        # Named as the CLI's table names them (every option, compression included).
        self.options = [describe_options(row.options) for row in plan.rows]
        self._text = format_table(plan.rows)

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
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
        )

    def __repr__(self) -> str:
        return f"what if: {self.source}\n{self.memory}\n{self._text}"


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
