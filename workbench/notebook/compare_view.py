"""The side-by-side view of a :class:`~workbench.notebook.compare.Comparison`: loss against
steps and against wall time (one line per strategy, fed from each run's events) and the table of
figures, refreshed at most 10 times a second until the last run ends."""

from __future__ import annotations

import ipywidgets as widgets
from bokeh.layouts import row
from bokeh.models import ColumnDataSource
from bokeh.palettes import Category10
from bokeh.plotting import figure

from workbench.charts.live_charts import HEIGHT, WIDTH, LiveUpdater
from workbench.events.records import ScalarEvent


class ComparisonView:
    def __init__(self, comparison) -> None:
        from jupyter_bokeh.widgets import BokehModel

        self.comparison = comparison
        count = len(comparison.configs)
        self.sources = [
            ColumnDataSource({"step": [], "time": [], "loss": []}) for _ in range(count)
        ]
        self._read = [0] * count
        size = {"width": WIDTH, "height": HEIGHT}
        by_step = figure(title="loss against steps", x_axis_label="step", **size)
        by_time = figure(title="loss against wall time", x_axis_label="seconds", **size)
        colours = Category10[10]
        for index, config in enumerate(comparison.configs):
            label = f"{index + 1}. {config.strategy}"
            colour = colours[index % len(colours)]
            source = self.sources[index]
            by_step.line("step", "loss", source=source, color=colour, legend_label=label)
            by_time.line("time", "loss", source=source, color=colour, legend_label=label)
        self.figures = {"by_step": by_step, "by_time": by_time}
        self.table = widgets.HTML()
        self.widget = widgets.VBox([BokehModel(row(by_step, by_time)), self.table])
        self.updater = LiveUpdater(self.refresh, lambda: comparison.done)

    def refresh(self) -> None:
        for index, run in enumerate(list(self.comparison.runs)):
            new = run.log.since(self._read[index])  # only what arrived since the last refresh
            self._read[index] += len(new)
            losses = [e for e in new if isinstance(e, ScalarEvent) and e.name == "loss"]
            if losses:
                self.sources[index].stream(
                    {
                        "step": [event.step for event in losses],
                        "time": [event.time for event in losses],
                        "loss": [event.value for event in losses],
                    }
                )
        self.table.value = self.comparison.table_html()
