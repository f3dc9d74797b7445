"""A standalone HTML page of one run's charts, for a JupyterLab tab.

In: a run id, a chart page name (:data:`~workbench.server.run_charts.PAGES`) and the server's
base URL. Out: an HTML document holding the page's figures, built by the
notebook's :class:`~workbench.charts.live_charts.LiveCharts` with empty sources, that loads BokehJS
from this extension (never from a CDN: a JupyterLab may have no internet) and fetches the
columns from the chart-data endpoint — at once, then every ``POLL_MILLISECONDS`` while the run
is running. One path for the data, the JSON endpoint, whatever the page shows.
"""

from __future__ import annotations

import bokeh
from bokeh.embed import file_html
from bokeh.layouts import column
from bokeh.resources import Resources
from jupyter_server.utils import url_path_join

from workbench.charts.live_charts import LiveCharts
from workbench.events import EventLog
from workbench.server.run_charts import page_figures

POLL_MILLISECONDS = 500  # as often as the sidebar refreshes a live run
FIGURE_PREFIX = "figure:"  # a figure's Bokeh name, so the script can set its device axis

# Appended to Bokeh's standalone file template, after the script that embeds the document.
PAGE_TEMPLATE = """
{% block inner_body %}
{{ super() }}
<script>
(function () {
  const dataUrl = {{ data_url | tojson }};
  const figurePrefix = {{ figure_prefix | tojson }};
  function sameList(a, b) {
    return a.length === b.length && a.every((item, index) => item === b[index]);
  }
  function draw(doc, reply) {
    for (const [name, columns] of Object.entries(reply.sources)) {
      const source = doc.get_model_by_name(name);
      if (source !== null) source.data = columns;
    }
    for (const [name, factors] of Object.entries(reply.factors)) {
      const chart = doc.get_model_by_name(figurePrefix + name);
      if (chart !== null && !sameList(chart.y_range.factors, factors)) {
        chart.y_range.factors = factors;
      }
    }
  }
  async function poll() {
    const doc = window.Bokeh && Bokeh.documents.length > 0 ? Bokeh.documents[0] : null;
    if (doc === null) {  // BokehJS is still embedding the document
      setTimeout(poll, 50);
      return;
    }
    let again = true;
    try {
      // Same origin: the browser sends the Jupyter login cookie with it.
      const response = await fetch(dataUrl, {
        credentials: "same-origin",
        headers: {Accept: "application/json"},
      });
      if (response.ok) {
        const reply = await response.json();
        draw(doc, reply);
        again = reply.recording === true;  // its last events come after "finished"
      } else {
        again = response.status >= 500;  // a run that is gone (404) or a lost login stops it
      }
    } catch (error) {
      console.warn("dtrain workbench: chart data unavailable, retrying", error);
    }
    if (again) setTimeout(poll, {{ poll_milliseconds }});
  }
  poll();
})();
</script>
{% endblock %}
"""


def bokeh_resources(base_url: str) -> Resources:
    """BokehJS from this extension's static route (``<base>/workbench/static/bokeh/``, which
    serves ``bokeh.util.paths.bokehjs_path()``), versioned so a Bokeh upgrade is not hidden by
    a browser's cache."""
    # Bokeh's server mode puts "static/" between the root and the file ("js/bokeh.min.js");
    # rooting at <base>/workbench/ and prefixing "bokeh/" lands on the route above.
    return Resources(
        mode="server",
        root_url=url_path_join(base_url, "workbench") + "/",
        path_versioner=lambda path: f"bokeh/{path}?v={bokeh.__version__}",
    )


def chart_data_url(base_url: str, run_id: str, page: str) -> str:
    return url_path_join(base_url, "workbench", "api", "runs", run_id, "charts", page)


def render_chart_page(run_id: str, page: str, base_url: str) -> str:
    """The HTML of chart page ``page`` of run ``run_id``; ``KeyError`` for an unknown page."""
    names = page_figures(page)
    # Never fed here (the script fetches the columns), so the batch size does not matter.
    charts = LiveCharts(EventLog(), batch_size=1, figure_names=names)
    for name, chart in charts.figures.items():
        chart.name = FIGURE_PREFIX + name
        chart.sizing_mode = "stretch_both"  # a JupyterLab tab: fill it, however it is resized
    layout = column(*charts.figures.values(), sizing_mode="stretch_both")
    return file_html(
        layout,
        resources=bokeh_resources(base_url),
        title=f"dtrain run {run_id}: {page}",
        template=PAGE_TEMPLATE,
        template_variables={
            "data_url": chart_data_url(base_url, run_id, page),
            "figure_prefix": FIGURE_PREFIX,
            "poll_milliseconds": POLL_MILLISECONDS,
        },
    )
