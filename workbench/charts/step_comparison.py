"""One step, predicted and measured, on the same timeline: for every device a row of what the
planner simulated and, under it, a row of what the run recorded, each from its step's start.

The rows are plain data (``device``, ``source``: ``predicted`` or ``measured``, ``phase``,
``start``, ``end``, seconds from the step's start), so the chart knows nothing of the planner
or the run; :mod:`workbench.notebook.step_view` turns a run's prediction and events into them,
devices by their short names (``task0-cpu0``). Each device's name stands level, left of its
two rows, so names never run into each other however many devices there are. Phases take the
live timeline's colours (``live_charts.PHASE_COLOURS``).
"""

from __future__ import annotations

from collections.abc import Sequence

from bokeh.models import ColumnDataSource, FactorRange, HoverTool
from bokeh.plotting import figure
from bokeh.transform import factor_cmap

from workbench.charts.live_charts import PHASE_COLOURS
from workbench.events.records import Phase

SOURCES = ("predicted", "measured")
ROW_PX = 28  # a bar and its gap: two rows a device leave its name room to stand level
TOOLS = "pan,xbox_zoom,reset"


def step_comparison(
    rows: Sequence[dict],
    title: str = "one step: predicted and measured",
    devices: Sequence[str] = (),
):
    """A Bokeh figure of ``rows`` (see the module docstring), ``devices`` first in their order
    (rank order), then any other in first-seen order, each with its predicted row above its
    measured one."""
    devices = list(dict.fromkeys([*devices, *(row["device"] for row in rows)]))
    factors = [(device, source) for device in devices for source in SOURCES]
    data = {
        "y": [(row["device"], row["source"]) for row in rows],
        "phase": [row["phase"] for row in rows],
        "start": [row["start"] * 1e3 for row in rows],
        "end": [row["end"] * 1e3 for row in rows],
    }
    chart = figure(
        y_range=FactorRange(*reversed(factors), group_padding=0.6),
        height=140 + ROW_PX * len(factors),
        width=900,
        title=title,
        x_axis_label="milliseconds since the step began",
        tools=TOOLS,
        toolbar_location="above",
    )
    chart.toolbar.logo = None
    (axis,) = chart.yaxis
    axis.group_label_orientation = "horizontal"  # device names level, not along the axis
    axis.major_label_text_font_size = "11px"
    axis.group_text_font_size = "12px"
    phases = [phase for phase in PHASE_COLOURS if phase in set(data["phase"])] or [Phase.COMPUTE]
    chart.hbar(
        y="y",
        left="start",
        right="end",
        height=0.8,
        source=ColumnDataSource(data),
        color=factor_cmap("phase", [PHASE_COLOURS[p] for p in phases], phases),
        legend_field="phase",
    )
    chart.add_tools(HoverTool(tooltips=[("phase", "@phase"), ("ms", "@start{0.00} to @end{0.00}")]))
    chart.legend.orientation = "horizontal"
    chart.add_layout(chart.legend[0], "below")
    return chart
