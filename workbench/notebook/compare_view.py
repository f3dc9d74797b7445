"""The side-by-side view of a :class:`~workbench.notebook.compare.Comparison`: the table of
figures first, then loss against steps and, under it, against the time since each run's first
step (one line per run, fed from each run's events), refreshed at most 10 times a second until
the last run ends.

Runs often draw the same loss (the same model, data and seed on different strategies), so each
run has its own colour, dash and marker, its markers staggered along the line so that curves
that coincide still show every run's; the legend stands beside the charts, where it hides no
line, and a click on an entry hides that run's line.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import cast

import ipywidgets as widgets
from bokeh.layouts import column
from bokeh.models import ColumnDataSource, Legend, LegendItem
from bokeh.palettes import Category10
from bokeh.plotting import figure

from workbench.charts.live_charts import HEIGHT, WIDTH, LiveUpdater
from workbench.events.records import FAULT_PHASES, PhaseEvent, ScalarEvent
from workbench.notebook.live_bokeh import live_bokeh_model

COLOURS = Category10[10]
DASHES = ("solid", "dashed", "dotted", "dotdash", "dashdot")
MARKERS = ("circle", "square", "triangle", "diamond", "inverted_triangle", "hex", "star")
MARKERS_PER_LINE = 12  # enough to tell the lines apart, few enough not to hide them
TOOLS = "pan,box_zoom,reset"
TIME_TITLE = "loss against time since each run's first step"


def first_step_start(events: Iterable[PhaseEvent | ScalarEvent]) -> float | None:
    """When the run's first step began on its clock: the earliest start of a phase of the
    step its first loss names (that loss's time if no phase was recorded), or None before any
    loss. Events' times count from the job's start, which a cluster run spends starting its
    cluster and staging its data (docs/architecture/events.md, "Events"); the view counts from here.

    Examples
    --------
    >>> step = [PhaseEvent("/task:0", "compute", 0, 4.0, 4.5), ScalarEvent("loss", 0, 2.3, 4.6)]
    >>> first_step_start(step), first_step_start(step[:1])
    (4.0, None)
    """
    events = list(events)
    first_loss = next((e for e in events if isinstance(e, ScalarEvent) and e.name == "loss"), None)
    if first_loss is None:
        return None
    starts = [
        event.start
        for event in events
        if isinstance(event, PhaseEvent)
        and event.step == first_loss.step
        and event.phase not in FAULT_PHASES
    ]
    return min([*starts, first_loss.time])


def marked(steps: Sequence[int], index: int, count: int, total_steps: int) -> list[bool]:
    """Which of a run's ``steps`` carry its marker: every ``total_steps / MARKERS_PER_LINE``
    steps, shifted by the run's place among ``count`` runs so that lines drawn over each other
    show their markers side by side.

    Examples
    --------
    >>> [s for s, m in zip(range(48), marked(range(48), 0, 2, 48)) if m][:3]
    [0, 4, 8]
    >>> [s for s, m in zip(range(48), marked(range(48), 1, 2, 48)) if m][:3]
    [2, 6, 10]
    """
    stride = max(1, total_steps // MARKERS_PER_LINE)
    shift = index * stride // max(1, count)
    return [(step - shift) % stride == 0 for step in steps]


def run_label(index: int, config) -> str:
    """``2. mirrored`` (with the compression, when the run compresses its gradients)."""
    compression = config.options.get("compression")
    shown = f" {compression}" if compression not in (None, "none") else ""
    return f"{index + 1}. {config.strategy}{shown}"


def _figure(title: str, x_axis_label: str) -> figure:
    chart = figure(
        title=title,
        x_axis_label=x_axis_label,
        y_axis_label="loss",
        tools=TOOLS,
        width=2 * WIDTH,  # the legend beside it takes a part of the width
        height=HEIGHT,
    )
    chart.toolbar.autohide = True
    chart.toolbar.logo = None
    return chart


class ComparisonView:
    def __init__(self, comparison) -> None:
        self.comparison = comparison
        configs = comparison.configs
        columns = ("step", "time", "loss")
        self.sources = [ColumnDataSource({c: [] for c in columns}) for _ in configs]
        self.marker_sources = [ColumnDataSource({c: [] for c in columns}) for _ in configs]
        self._read = [0] * len(configs)
        self._origins: list[float | None] = [None] * len(configs)
        by_step = _figure("loss against steps", "step")
        by_time = _figure(TIME_TITLE, "seconds since the run's first step")
        self.figures = {"by_step": by_step, "by_time": by_time}
        for chart, x in ((by_step, "step"), (by_time, "time")):
            items = []
            for index, config in enumerate(configs):
                style = {
                    "color": COLOURS[index % len(COLOURS)],
                    "source": self.sources[index],
                }
                line = chart.line(
                    x, "loss", line_dash=DASHES[index % len(DASHES)], line_width=2, **style
                )
                dots = chart.scatter(
                    x,
                    "loss",
                    marker=MARKERS[index % len(MARKERS)],
                    size=7,
                    fill_color="white",
                    **{**style, "source": self.marker_sources[index]},
                )
                items.append(LegendItem(label=run_label(index, config), renderers=[line, dots]))
            legend = Legend(items=items, click_policy="hide")
            chart.add_layout(legend, "right")  # outside the data
        self.table = widgets.HTML()
        self._charts_lock = threading.Lock()  # a new view is drawn from the rows of now
        charts = live_bokeh_model(column(by_step, by_time), self._charts_lock)
        self.widget = widgets.VBox([self.table, charts])
        self.updater = LiveUpdater(self.refresh, lambda: comparison.done)

    def refresh(self) -> None:
        runs = list(self.comparison.runs)
        for index, run in enumerate(runs):
            if self._origins[index] is None:
                self._origins[index] = first_step_start(run.log.since(0))
                if self._origins[index] is None:
                    continue  # drawn from its first step on, once it has one
            origin = cast(float, self._origins[index])  # set above, or the run was skipped
            new = run.log.since(self._read[index])  # only what arrived since the last refresh
            self._read[index] += len(new)
            losses = [e for e in new if isinstance(e, ScalarEvent) and e.name == "loss"]
            if not losses:
                continue
            rows: dict[str, list] = {
                "step": [event.step for event in losses],
                "time": [event.time - origin for event in losses],
                "loss": [event.value for event in losses],
            }
            chosen = marked(rows["step"], index, len(self.sources), run.total_steps)
            marked_rows = {
                name: [v for v, m in zip(values, chosen) if m] for name, values in rows.items()
            }
            with self._charts_lock:
                self.sources[index].stream(rows)
                self.marker_sources[index].stream(marked_rows)
        self.table.value = self.comparison.table_html()
