"""Live Bokeh charts of a run: loss, throughput, per-device utilization, traffic, a timeline
of every device's phases (pipeline bubbles, all-reduce phases, parameter-server pushes and pulls
show up as gaps and colours; a pipeline stage's computes in the colours of their schedule's
actions, forward, backward, input and weight gradient, labelled ``F3``, ``B3`` where the bar has
room (:mod:`workbench.charts.pipeline_actions`); a failure as a red line and triangle on its
device's row, a recovery as a hatched band, a dropped push in orange), a straggler view, and
each device's measured peak memory over the steps beside the split of its last report by
category, with the run's predicted peak dashed where the run has one
(:mod:`workbench.charts.memory_data`). The timeline shows the detail of the last
``DETAIL_STEPS`` steps; the ``phases`` chart above it shows the whole run as per-interval phase
shares (:mod:`workbench.charts.phase_shares`), readable at any length.

Every chart labels both axes, keeps its legend outside the data and has a small toolbar (pan,
box zoom, reset) that shows while the pointer is over it (docs/jupyterlab.md, "Chart tabs").

Each chart reads a ``ColumnDataSource``; :meth:`LiveCharts.refresh` feeds it what arrived since
the last refresh (``stream`` with rollover for the growing charts, whole tables for the
per-device ones). :class:`LiveUpdater` refreshes them at most ``MAX_REFRESH_HZ`` times a second from
a background thread, however fast events arrive, and less often when refreshing gets costly, so
that the charts stay within ``MAX_BUSY_SHARE`` of the time (``dtrain bench charts`` measures
what they cost a run), until the run ends.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from bokeh.core.properties import field
from bokeh.layouts import column, row
from bokeh.models import (
    AdaptiveTicker,
    CDSView,
    ColumnDataSource,
    CustomJS,
    CustomJSFilter,
    CustomJSTickFormatter,
    DataRange1d,
    FactorRange,
    GlyphRenderer,
    HoverTool,
    IntersectionFilter,
    LegendItem,
    NumeralTickFormatter,
)
from bokeh.plotting import figure
from bokeh.transform import dodge, factor_cmap

from workbench.charts.chart_data import ACTIONS, FAULT_TIMELINES, ChartFeed
from workbench.charts.memory_data import (
    CATEGORIES,
    MEMORY_COLUMNS,
    PREDICTED_COLUMNS,
    SPLIT_COLUMNS,
)
from workbench.charts.phase_shares import SHARE_COLUMNS
from workbench.charts.pipeline_actions import ACTION_COLUMNS
from workbench.events import EventLog, Phase

MAX_REFRESH_HZ = 10
MAX_BUSY_SHARE = 0.02  # of wall time spent refreshing, whatever the refresh costs
FINISHED_POLL_S = 0.1  # how soon a refresher waiting out its back-off sees the run end
ROLLOVER = {
    "loss": 20_000,
    "throughput": 20_000,
    "timeline": 20_000,
    ACTIONS: 20_000,
    "memory": 20_000,
    **{chart: 20_000 for chart in FAULT_TIMELINES.values()},
}
# Compute green and the optimizer's update olive (two hues: side by side on a long run a light
# and a dark green read as one), moving tensors in blues and purples, waiting in grey; the
# utilization bars (compute / communication / idle) use the green, blue and grey.
PHASE_COLOURS = {
    Phase.COMPUTE: "#2ca02c",
    Phase.UPDATE: "#bcbd22",
    Phase.ALLREDUCE: "#1f77b4",
    Phase.SEND: "#17becf",
    Phase.RECV: "#aec7e8",
    Phase.PS_PUSH: "#9467bd",
    Phase.PS_PULL: "#c5b0d5",
    Phase.IDLE: "#dddddd",
}
COMPUTE, COMMUNICATION, IDLE = "#2ca02c", "#1f77b4", "#dddddd"
# Faults in reds and orange, which no ordinary phase uses, so they stand out of the timeline.
FAULT_COLOURS = {Phase.FAILURE: "#d62728", Phase.RECOVERY: "#fcbba1", Phase.DROPPED: "#ff7f0e"}
TIMELINE_COLUMNS = ["device", "phase", "step", "start", "end", "bytes"]
# A pipeline action's bar: a timeline row, what the action was, and where its label goes.
ACTION_TIMELINE_COLUMNS = [*TIMELINE_COLUMNS, *ACTION_COLUMNS, "middle"]
# The charts holding a timeline's detail (streamed, drawn for the last DETAIL_STEPS steps only).
DETAIL_CHARTS = ("timeline", ACTIONS)
WIDTH, HEIGHT = 460, 230
# workbench.runtime.devices.device_tag in the browser ("/job:worker/task:1/device:CPU:0" ->
# "task1-cpu0"); BokehJS ignores label overrides on categorical axes, so a formatter it is. Its
# body runs as a function of (tick, index, ticks): those names are taken.
SHORT_DEVICE_NAME_JS = """
const fields = {};
for (const part of String(tick).split("/")) {
  const at = part.indexOf(":");
  if (at > 0) fields[part.slice(0, at)] = part.slice(at + 1);
}
if (fields.task === undefined) return tick;
const [kind, ordinal] = (fields.device || "CPU:0").split(":");
const job = fields.job && fields.job !== "worker" ? fields.job + "-" : "";
return job + "task" + fields.task + "-" + kind.toLowerCase() + ordinal;
"""
FIGURE_NAMES = (
    "loss",
    "throughput",
    "utilization",
    "traffic",
    "phases",
    "timeline",
    "stragglers",
    "memory",
    "memory_split",
)
# Memory by category: resident state in blues, what a step makes in warm hues, buffers purple.
CATEGORY_COLOURS = {
    "parameters": "#1f77b4",
    "optimizer": "#9ecae1",
    "gradients": "#ff7f0e",
    "activations": "#d62728",
    "communication": "#9467bd",
}
# Byte ticks at powers of two (8 KiB apart, not 9.766 KiB), all in the unit of the largest:
# "0 KiB, 16 KiB, 32 KiB", "1.5 MiB", "2 GiB".
BYTES_JS = """
const top = Math.max(...ticks.map(Math.abs));
const units = ["B", "KiB", "MiB", "GiB", "TiB"];
let power = 0;
while (power < units.length - 1 && top >= 1024 ** (power + 1)) power += 1;
const value = tick / 1024 ** power;
return (Number.isInteger(value) ? value : value.toFixed(1)) + " " + units[power];
"""
UTILIZATION_TITLE = "utilization (last 5 s)"
DETAIL_STEPS = 200  # the timeline's detail: a few hundred steps still show each phase
# Keeps the rows of the newest DETAIL_STEPS steps (a CDSView filter: the source keeps streaming
# as before; the browser picks the rows to draw, and the x range follows them).
LAST_STEPS_JS = """
const steps = source.data.step;
let newest = -Infinity;
for (const step of steps) if (step > newest) newest = step;
return Array.from(steps, step => step > newest - keep);
"""
# Keeps the actions whose bar, at the chart's zoom of now, is wide enough for its label (about
# 6 pixels a character at its 10px font); re-run whenever the x range or the chart's width
# changes.
WIDE_ENOUGH_JS = """
const {start, end, action} = source.data;
// The chart's width is unset until it is first laid out (then its change runs this again).
const width = chart.properties.inner_width.is_unset ? NaN : chart.inner_width;
const scale = width / (x_range.end - x_range.start);
if (!Number.isFinite(scale) || scale <= 0) return Array.from(start, () => false);
return Array.from(start, (left, i) => (end[i] - left) * scale >= 6 * action[i].length + 4);
"""
TOOLS = "pan,box_zoom,reset"


def newest_steps(rows: dict[str, list], keep: int) -> dict[str, list]:
    """The rows of the newest ``keep`` steps among ``rows``. The timeline draws only those: the
    rows of older steps in a large batch (a refresh that backed off, a chart tab's first read)
    would never be drawn, and a browser handed thousands of rows at once stalls while it takes
    them in.

    Examples
    --------
    >>> newest_steps({"step": [1, 2, 3, 3], "phase": ["a", "b", "c", "d"]}, 2)
    {'step': [2, 3, 3], 'phase': ['b', 'c', 'd']}
    """
    steps = rows["step"]
    if not steps:
        return rows
    oldest_kept = max(steps) - keep + 1
    if min(steps) >= oldest_kept:
        return rows
    kept = [index for index, step in enumerate(steps) if step >= oldest_kept]
    return {name: [values[index] for index in kept] for name, values in rows.items()}


def _figure(title: str, **options) -> figure:
    options.setdefault("width", WIDTH)
    options.setdefault("height", HEIGHT)
    # Fill the notebook's output width (the widths above are the minimum each chart asks for).
    options.setdefault("sizing_mode", "stretch_width")
    chart = figure(title=title, tools=TOOLS, **options)
    chart.toolbar.autohide = True  # over the chart's corner only while the pointer is in it
    chart.toolbar.logo = None
    return chart


def _hover(**options) -> HoverTool:
    # Works without its button, which would make the toolbar longer.
    return HoverTool(visible=False, **options)


def _arrays(columns: dict[str, list]) -> dict[str, Any]:
    # NumPy columns travel to the browser as binary buffers; lists are encoded item by item,
    # which made a refresh several times slower.
    return {
        name: np.asarray(values) if values and not isinstance(values[0], str) else values
        for name, values in columns.items()
    }


class LiveCharts:
    """The charts of one run, fed from its event log: ``figure_names`` (default all of
    ``FIGURE_NAMES``) are built, in ``figures`` by name and laid out in ``layout``; every
    source is fed either way (a page that shows two charts builds only those two). Each
    source's ``name`` is its key in ``sources``, so a page's script can find it."""

    def __init__(
        self, log: EventLog, batch_size: int, figure_names: tuple[str, ...] = FIGURE_NAMES
    ) -> None:
        unknown = sorted(set(figure_names) - set(FIGURE_NAMES))
        if unknown:
            raise ValueError(f"figure_names: {unknown} not among {', '.join(FIGURE_NAMES)}")
        self.feed = ChartFeed(log, batch_size)
        columns = {
            "loss": ["step", "loss", "time"],
            "test_loss": ["step", "value", "time"],
            "throughput": ["step", "samples_per_second"],
            "utilization": [
                "device",
                "compute",
                "communication",
                "idle",
                "gpu_utilization",
                "gpu_memory_used",
            ],
            "traffic": ["device", "sent", "received"],
            "traffic_notes": ["device", "note"],
            "phase_shares": list(SHARE_COLUMNS),
            "timeline": TIMELINE_COLUMNS,
            ACTIONS: ACTION_TIMELINE_COLUMNS,
            **{chart: TIMELINE_COLUMNS for chart in FAULT_TIMELINES.values()},
            "stragglers": ["device", "min", "median", "max"],
            "memory": list(MEMORY_COLUMNS),
            "memory_split": list(SPLIT_COLUMNS),
            "memory_predicted": list(PREDICTED_COLUMNS),
        }
        self.sources = {
            key: ColumnDataSource({column: [] for column in names}, name=key)
            for key, names in columns.items()
        }
        self._device_figures: list[figure] = []
        build = {
            "loss": self._loss,
            "throughput": self._throughput,
            "utilization": self._utilization,
            "traffic": self._traffic,
            "phases": self._phases,
            "timeline": self._timeline,
            "stragglers": self._stragglers,
            "memory": self._memory,
            "memory_split": self._memory_split,
        }
        self.figures = {name: build[name]() for name in FIGURE_NAMES if name in figure_names}
        charts = self.figures
        stretch = {"sizing_mode": "stretch_width"}
        pairs = [("loss", "throughput"), ("utilization", "traffic"), ("memory", "memory_split")]
        rows = [
            row(*[charts[name] for name in pair if name in charts], **stretch)
            for pair in pairs
            if any(name in charts for name in pair)
        ]
        wide = [charts[name] for name in ("phases", "timeline", "stragglers") if name in charts]
        self.layout = column(*rows, *wide, **stretch)
        self._lock = threading.Lock()

    def refresh(self) -> None:
        with self._lock:
            update = self.feed.update()
            for chart, rows in update.appended.items():
                if chart in DETAIL_CHARTS:
                    rows = newest_steps(rows, DETAIL_STEPS)
                if chart in self.sources:
                    self.sources[chart].stream(_arrays(rows), rollover=ROLLOVER.get(chart))
            for chart, table in update.replaced.items():
                self.sources[chart].data = table
            if "memory_split" in update.replaced:
                self._memory_devices()
            usage = update.replaced.get("utilization", {})
            devices = usage.get("device")
            figures = self._device_figures
            if devices and figures and list(figures[0].y_range.factors) != devices[::-1]:
                for chart in figures:
                    chart.y_range.factors = list(reversed(devices))
            if "utilization" in self.figures and usage:
                has_gpu = not np.all(np.isnan(np.asarray(usage["gpu_utilization"], float)))
                self._gpu_marker.visible = bool(has_gpu)
                suffix = " — ◆ NVML GPU utilization (hover: memory)" if has_gpu else ""
                self.figures["utilization"].title.text = UTILIZATION_TITLE + suffix

    def show_predicted_memory(self, totals: dict[str, int]) -> None:
        """Draw the run's predicted peak bytes per device (``totals``, the prediction's
        ``memory_bytes`` totals) beside the measured ones; an empty mapping clears them."""
        with self._lock:
            self.sources["memory_predicted"].data = self.feed.memory.predicted(totals)
            self._memory_devices()

    def _memory_devices(self) -> None:
        """The split chart's rows: every device that reported or has a prediction, the first
        at the top (its own rows: a device that reports memory may have no phases)."""
        chart = self.figures.get("memory_split")
        devices = list(reversed(self.feed.memory.devices()))
        if chart is not None and list(chart.y_range.factors) != devices:
            chart.y_range.factors = devices

    # The charts ---------------------------------------------------------------------------

    def _loss(self) -> figure:
        chart = _figure("loss", x_axis_label="step", y_axis_label="loss")
        chart.line("step", "loss", source=self.sources["loss"], legend_label="train")
        chart.scatter(
            "step",
            "value",
            source=self.sources["test_loss"],
            size=9,
            color="firebrick",
            legend_label="test",
        )
        _legend_below(chart)
        return chart

    def _throughput(self) -> figure:
        chart = _figure("throughput", x_axis_label="step", y_axis_label="samples/s")
        chart.yaxis.formatter = NumeralTickFormatter(format="0,0")
        chart.line("step", "samples_per_second", source=self.sources["throughput"])
        return chart

    def _device_figure(self, title: str, **options) -> figure:
        chart = _figure(title, y_range=[], y_axis_label="device", **options)
        # The factors stay the full device names (the data and the hover use them); the axis
        # shows the short names of Dask's task keys, so the labels leave the bars their width.
        chart.yaxis.formatter = CustomJSTickFormatter(code=SHORT_DEVICE_NAME_JS)
        self._device_figures.append(chart)
        return chart

    def _utilization(self) -> figure:
        chart = self._device_figure(
            UTILIZATION_TITLE, x_range=(0, 1), height=HEIGHT + 30, x_axis_label="share of time"
        )
        chart.hbar_stack(
            ["compute", "communication", "idle"],
            y="device",
            height=0.7,
            color=[COMPUTE, COMMUNICATION, IDLE],
            source=self.sources["utilization"],
            # A Recv or an all-reduce includes waiting for the peer: a pipeline's bubble shows
            # up here as communication on the stage that waits.
            legend_label=["compute", "communication or waiting", "idle"],
        )
        # On GPUs NVML says how busy the GPU itself was, next to how busy its device was
        # (hidden on CPUs, which have no such figure).
        self._gpu_marker = chart.scatter(
            x="gpu_utilization",
            y="device",
            marker="diamond",
            size=14,
            color="black",
            source=self.sources["utilization"],
            visible=False,
        )
        tooltips = [
            ("NVML GPU utilization", "@gpu_utilization{0%}"),
            ("GPU memory used", "@gpu_memory_used{0.0 b}"),
        ]
        return _with_hover(chart, [self._gpu_marker], tooltips)

    def _traffic(self) -> figure:
        # From 0: with no traffic at all (a failed run) the range would centre on it, -1 to 1 B.
        chart = self._device_figure(
            "bytes sent / received",
            height=HEIGHT + 30,
            x_axis_label="bytes",
            x_range=DataRange1d(start=0),
        )
        source = self.sources["traffic"]
        bars = (("sent", 0.18, COMMUNICATION), ("received", -0.18, "#aec7e8"))
        for direction, offset, colour in bars:
            chart.hbar(
                y=dodge("device", offset, range=chart.y_range),
                right=direction,
                height=0.34,
                source=source,
                color=colour,
                legend_label=direction,
            )
        chart.xaxis.formatter = NumeralTickFormatter(format="0.0b")
        chart.xaxis.ticker.desired_num_ticks = 4  # byte labels are wide
        chart.text(
            x=0,
            y="device",
            text="note",
            source=self.sources["traffic_notes"],
            x_offset=6,
            text_baseline="middle",
            text_font_size="11px",
            text_color="#555555",
        )
        _legend_below(chart)
        return chart

    def _phases(self) -> figure:
        chart = self._device_figure(
            "phase shares per interval, whole run",
            width=2 * WIDTH,
            height=HEIGHT,
            x_axis_label="seconds since start",
        )
        bars = chart.quad(
            left="interval_start",
            right="interval_end",
            bottom="bottom",
            top="top",
            source=self.sources["phase_shares"],
            color=factor_cmap("phase", list(PHASE_COLOURS.values()), list(PHASE_COLOURS)),
            legend_field="phase",
        )
        tooltips = [
            ("phase", "@phase"),
            ("share", "@share{0%}"),
            ("interval from", "@interval_start{0.00} s"),
        ]
        return _with_hover(chart, [bars], tooltips)

    def _timeline(self) -> figure:
        chart = self._device_figure(
            f"timeline, last {DETAIL_STEPS} steps",
            width=2 * WIDTH,
            height=HEIGHT + 40,
            x_axis_label="seconds since start",
        )
        last_steps = CustomJSFilter(args={"keep": DETAIL_STEPS}, code=LAST_STEPS_JS)
        bars = _spans(
            chart,
            self.sources["timeline"],
            0.8,
            view=CDSView(filter=last_steps),
            color=factor_cmap("phase", list(PHASE_COLOURS.values()), list(PHASE_COLOURS)),
            legend_field="phase",
        )
        self._action_renderers(chart, last_steps)
        faults = self._fault_renderers(chart)
        tooltips = [
            ("phase", "@phase"),
            ("step", "@step"),
            ("seconds", "@start{0.000} to @end{0.000}"),
            ("bytes", "@bytes"),
        ]
        return _with_hover(chart, [bars, *faults], tooltips)

    def _action_renderers(self, chart: figure, last_steps: CustomJSFilter) -> GlyphRenderer:
        """A pipeline stage's computes, from the ``actions`` source: coloured by their action's
        kind and chunk, one legend entry per kind (and chunk past the first), the action and
        its micro-batch on hovering, and the action written on each bar wide enough for it at
        the zoom of the moment. A run without pipeline actions leaves the source empty, and
        its timeline and legend are what they always were."""
        source = self.sources[ACTIONS]
        # A white edge: a stage's actions often follow one another with no gap between them.
        bars = _spans(
            chart,
            source,
            0.8,
            view=CDSView(filter=last_steps),
            fill_color="colour",
            line_color="white",
            line_width=1,
        )
        wide_enough = CustomJSFilter(
            args={"chart": chart, "x_range": chart.x_range}, code=WIDE_ENOUGH_JS
        )
        chart.text(
            x="middle",
            y="device",
            text="action",
            source=source,
            view=CDSView(filter=IntersectionFilter(operands=[last_steps, wide_enough])),
            text_align="center",
            text_baseline="middle",
            text_font_size="10px",
            text_color="ink",
        )
        # Zooming, panning or resizing changes which bars have room for their label.
        again = CustomJS(args={"filter": wide_enough}, code="filter.change.emit();")
        for attribute in ("start", "end"):
            chart.x_range.js_on_change(attribute, again)
        chart.js_on_change("inner_width", again)
        chart.legend[0].items.append(LegendItem(label=field("legend"), renderers=[bars]))
        tooltips = [
            ("action", "@action: @detail"),
            ("step", "@step"),
            ("seconds", "@start{0.000} to @end{0.000}"),
        ]
        chart.add_tools(_hover(renderers=[bars], tooltips=tooltips))
        return bars

    def _fault_renderers(self, chart: figure) -> list:
        """Failures, recoveries and dropped pushes on the timeline, each from its own source
        and each with its own legend entry, shown only once the run has one (a legend field
        lists the values its source holds)."""
        recoveries = _spans(
            chart,
            self.sources[FAULT_TIMELINES[Phase.RECOVERY]],
            0.8,
            fill_color=FAULT_COLOURS[Phase.RECOVERY],
            fill_alpha=0.7,
            hatch_pattern="/",
            hatch_color=FAULT_COLOURS[Phase.FAILURE],
            hatch_alpha=0.6,
            line_color=FAULT_COLOURS[Phase.FAILURE],
            line_alpha=0.4,
        )
        # Drawn first, under the phases: a band over the restore must not hide the steps that
        # begin at its end.
        chart.renderers = [recoveries, *(r for r in chart.renderers if r is not recoveries)]
        dropped = _spans(
            chart,
            self.sources[FAULT_TIMELINES[Phase.DROPPED]],
            0.5,
            color=FAULT_COLOURS[Phase.DROPPED],
        )
        failures = self.sources[FAULT_TIMELINES[Phase.FAILURE]]
        red = FAULT_COLOURS[Phase.FAILURE]
        # A failure has no length: a line across its device's row, and a triangle on top so it
        # shows at any zoom.
        line = chart.segment(
            x0="start",
            x1="start",
            y0=dodge("device", -0.45, range=chart.y_range),
            y1=dodge("device", 0.45, range=chart.y_range),
            source=failures,
            line_color=red,
            line_width=2,
        )
        marker = chart.scatter(
            x="start",
            y=dodge("device", 0.3, range=chart.y_range),
            marker="inverted_triangle",
            size=13,
            color=red,
            source=failures,
        )
        # Items made here, not with legend_field=: the plotting API would merge every
        # legend_field="phase" into the ordinary phases' one item.
        chart.legend[0].items.extend(
            LegendItem(label=field("phase"), renderers=renderers)
            for renderers in ([recoveries], [dropped], [line, marker])
        )
        return [recoveries, dropped, marker]

    def _stragglers(self) -> figure:
        chart = self._device_figure(
            "step time per device, last 200 steps (min / median / max)",
            width=2 * WIDTH,
            x_axis_label="step time (seconds)",
        )
        source = self.sources["stragglers"]
        chart.segment(x0="min", x1="max", y0="device", y1="device", source=source, line_width=3)
        chart.scatter(x="median", y="device", size=10, source=source, color="black")
        return chart

    def _memory(self) -> figure:
        chart = _figure(
            "peak tensor memory per device",
            height=HEIGHT + 40,
            x_axis_label="step",
            y_axis_label="peak since last report",
            y_range=DataRange1d(start=0),
        )
        _byte_axis(chart.yaxis[0])
        source = self.sources["memory"]
        # One segment per report, from the device's previous one: a line per device that the
        # reports can stream into in any order.
        chart.segment(
            x0="step0",
            y0="peak0",
            x1="step",
            y1="peak_bytes",
            source=source,
            line_color="colour",
            line_width=2,
        )
        points = chart.scatter(
            "step", "peak_bytes", source=source, color="colour", size=6, legend_field="label"
        )
        predicted = chart.hspan(
            y="predicted_bytes",
            source=self.sources["memory_predicted"],
            line_color="colour",
            line_dash="dashed",
            line_width=2,
            legend_field="kind",
        )
        tooltips = [
            ("device", "@label"),
            ("step", "@step"),
            ("peak", "@peak_bytes{0,0} B"),
        ]
        chart.add_tools(_hover(renderers=[points], tooltips=tooltips))
        chart.add_tools(
            _hover(
                renderers=[predicted], tooltips=[("predicted", "@label @predicted_bytes{0,0} B")]
            )
        )
        _legend_below(chart)
        chart.legend[0].ncols = 3  # a device each, and the prediction: in rows, within its width
        return chart

    def _memory_split(self) -> figure:
        chart = _figure(
            "memory at each device's last peak, by category",
            height=HEIGHT + 40,
            y_range=FactorRange(),
            x_range=DataRange1d(start=0),
            x_axis_label="bytes at the peak",
            y_axis_label="device",
        )
        chart.yaxis.formatter = CustomJSTickFormatter(code=SHORT_DEVICE_NAME_JS)
        _byte_axis(chart.xaxis[0])
        chart.xaxis.ticker.desired_num_ticks = 4  # byte labels are wide
        bars = chart.hbar_stack(
            list(CATEGORIES),
            y="device",
            height=0.7,
            color=[CATEGORY_COLOURS[name] for name in CATEGORIES],
            source=self.sources["memory_split"],
            legend_label=list(CATEGORIES),
        )
        predicted = self.sources["memory_predicted"]
        chart.segment(
            x0="predicted_bytes",
            x1="predicted_bytes",
            y0=dodge("device", -0.45, range=chart.y_range),
            y1=dodge("device", 0.45, range=chart.y_range),
            source=predicted,
            line_color="black",
            line_dash="dashed",
            line_width=2,
            legend_field="kind",
        )
        tooltips = [
            ("device", "@label, step @step"),
            ("peak", "@peak_bytes{0,0} B"),
            *((name, f"@{name}{{0,0}} B") for name in CATEGORIES),
        ]
        _with_hover(chart, bars, tooltips)
        chart.legend[0].ncols = 3  # six entries: in rows under the bars, within its width
        return chart


def _byte_axis(axis: Any) -> None:
    """Bytes on ``axis``: ticks at binary steps, labelled in KiB, MiB or GiB."""
    axis.ticker = AdaptiveTicker(base=2, mantissas=[1, 1.5], min_interval=1, num_minor_ticks=2)
    axis.formatter = CustomJSTickFormatter(code=BYTES_JS)


def _legend_below(chart: figure) -> None:
    """Inside the plot a legend would hide lines and bars."""
    chart.legend.orientation = "horizontal"
    chart.add_layout(chart.legend[0], "below")


def _spans(chart: figure, source: ColumnDataSource, height: float, **style: Any) -> GlyphRenderer:
    """Bars from ``start`` to ``end`` on each device's row of the timeline."""
    return chart.hbar(y="device", left="start", right="end", height=height, source=source, **style)


def _with_hover(chart: figure, renderers: list, tooltips: list[tuple[str, str]]) -> figure:
    """``chart`` finished as the device charts are: ``tooltips`` on hovering ``renderers``,
    the legend below."""
    chart.add_tools(_hover(renderers=renderers, tooltips=tooltips))
    _legend_below(chart)
    return chart


class LiveUpdater:
    """Calls ``refresh`` at most ``hz`` times a second (default ``MAX_REFRESH_HZ``) from a
    background thread until ``finished()`` says so, then once more (so the last events are
    drawn). With ``busy_share`` it also waits long enough that refreshing stays within that
    share of the time (the charts); None keeps the rate whatever a refresh takes (a panel's
    progress text, which must keep up with the run)."""

    def __init__(
        self,
        refresh: Callable[[], None],
        finished: Callable[[], bool],
        hz: float = MAX_REFRESH_HZ,
        busy_share: float | None = MAX_BUSY_SHARE,
        name: str = "dtrain-charts",
    ) -> None:
        self.refresh, self.finished = refresh, finished
        self.hz, self.busy_share = hz, busy_share
        self.refreshes = 0
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._halt.is_set():
            done = self.finished()
            started = time.perf_counter()
            self.refresh()
            took = time.perf_counter() - started
            self.refreshes += 1
            if done:
                return
            # At most hz, and refreshing busy at most busy_share of the time: the charts share
            # the kernel process (and its GIL) with a run training in it.
            wait = 1.0 / self.hz
            if self.busy_share is not None:
                wait = max(wait, took / self.busy_share - took)
            self._pause(wait)

    def _pause(self, seconds: float) -> None:
        """Wait ``seconds``, or less: the run's end cuts a long back-off short, so the last
        refresh (all of the run's data) comes at once."""
        deadline = time.monotonic() + seconds
        while not self._halt.is_set() and not self.finished():
            left = deadline - time.monotonic()
            if left <= 0:
                return
            self._halt.wait(min(left, FINISHED_POLL_S))

    def stopped(self) -> bool:
        """Whether it has stopped refreshing (the run ended, or it was closed)."""
        return not self._thread.is_alive()

    def close(self, timeout: float = 5.0) -> None:
        self._halt.set()
        self._thread.join(timeout)

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)
