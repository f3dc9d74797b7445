"""One step, predicted and measured, on the same timeline: for every device a row of what the
planner simulated and, under it, a row of what the run recorded, each from its step's start.

The rows are plain data (``device``, ``source``: ``predicted`` or ``measured``, ``phase``,
``start``, ``end``, seconds from the step's start), so the chart knows nothing of the planner
or the run; :mod:`workbench.notebook.step_view` turns a run's prediction and events into them,
devices by their short names (``task0-cpu0``). Each device's name stands level, left of its
two rows, so names never run into each other however many devices there are. Phases take the
live timeline's colours (``live_charts.PHASE_COLOURS``); a row may carry ``action``, the
pipeline schedule's action a compute ran (``F3``, ``I3@1``: the simulator's label, the event's
``action``), and is then coloured, named in the legend and hovered as the live timeline's
pipeline actions are (:mod:`workbench.charts.pipeline_actions`).
"""

from __future__ import annotations

from collections.abc import Sequence

from bokeh.models import ColumnDataSource, FactorRange, HoverTool
from bokeh.plotting import figure

from workbench.charts.live_charts import PHASE_COLOURS
from workbench.charts.pipeline_actions import parse_action

SOURCES = ("predicted", "measured")
ROW_PX = 28  # a bar and its gap: two rows a device leave its name room to stand level
TOOLS = "pan,xbox_zoom,reset"
OTHER_PHASE_COLOUR = "gray"  # a phase the live timeline has no colour for (a fault's)


def _looks(row: dict) -> tuple[str, str, str]:
    """A row's colour, legend entry and action (its phase's, or its pipeline action's)."""
    action = parse_action(row.get("action", "")) if row["phase"] == "compute" else None
    if action is None:
        return PHASE_COLOURS.get(row["phase"], OTHER_PHASE_COLOUR), row["phase"], ""
    return action.colour, action.legend, f"{action.action}: {action.detail}"


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
    looks = [_looks(row) for row in rows]
    data = {
        "y": [(row["device"], row["source"]) for row in rows],
        "phase": [row["phase"] for row in rows],
        "start": [row["start"] * 1e3 for row in rows],
        "end": [row["end"] * 1e3 for row in rows],
        "colour": [colour for colour, _, _ in looks],
        "legend": [legend for _, legend, _ in looks],
        "action": [action for _, _, action in looks],
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
    chart.hbar(
        y="y",
        left="start",
        right="end",
        height=0.8,
        source=ColumnDataSource(data),
        color="colour",
        legend_field="legend",
    )
    tooltips = [("phase", "@phase"), ("ms", "@start{0.00} to @end{0.00}")]
    if any(data["action"]):  # a pipeline's step: what each compute ran
        tooltips.insert(1, ("action", "@action"))
    chart.add_tools(HoverTool(tooltips=tooltips))
    chart.legend.orientation = "horizontal"
    chart.add_layout(chart.legend[0], "below")
    return chart
