"""Live Bokeh charts of a run, built from its events alone: what the notebook's panel, the
scheduler's dashboard pages, the JupyterLab chart panels (through the server) and the charts
benchmark all show.

What flows in: an :class:`~workbench.events.EventLog`. What flows out: Bokeh figures whose
sources :class:`~workbench.charts.live_charts.LiveCharts` refreshes with what is new
(:mod:`~workbench.charts.chart_data` turns events into columns, without Bokeh).
"""

from workbench.charts.live_charts import FIGURE_NAMES, MAX_REFRESH_HZ, LiveCharts, LiveUpdater

__all__ = ["FIGURE_NAMES", "MAX_REFRESH_HZ", "LiveCharts", "LiveUpdater"]
