"""Dask scheduler preload: the workbench's charts as pages of the scheduler's dashboard.

    dask scheduler --preload workbench.dashboard.preload

Importing this module adds ``/individual-workbench-loss``, ``-utilization``, ``-timeline`` and
``-memory`` to distributed's table of dashboard pages. A scheduler imports its preloads before it
builds its dashboard from that table, so the pages are served and listed by
``/individual-plots.json`` (dask-labextension offers them as panes). :func:`dask_setup`, run once
the scheduler starts, gives it the run board the pages read and the handler that clients publish
events to.
"""

from __future__ import annotations

import functools

from workbench.dashboard.handlers import board_of, install
from workbench.dashboard.run_board import RunBoard

# Page path -> the figures of the notebook's LiveCharts it shows.
PAGE_FIGURES = {
    "/individual-workbench-loss": ("loss", "throughput"),
    "/individual-workbench-utilization": ("utilization", "traffic"),
    "/individual-workbench-timeline": ("timeline", "stragglers"),
    "/individual-workbench-memory": ("memory", "memory_split"),
}


def _page(path: str, scheduler, extra: dict, document) -> None:
    # Bokeh and the charts are imported on the first page view, not at scheduler start.
    from distributed.dashboard.components.scheduler import BOKEH_THEME

    from workbench.dashboard.pages import show_page

    # A scheduler in a process that imported this module but was not itself started with the
    # preload has no board: its pages say there is no run.
    show_page(PAGE_FIGURES[path], board_of(scheduler) or RunBoard(), document, _run_asked(document))
    document.theme = BOKEH_THEME


def _run_asked(document) -> str | None:
    """The ``run`` argument of the page's address (``?run=<run id>``), if any."""
    context = document.session_context
    request = getattr(context, "request", None) if context is not None else None
    values = (request.arguments if request is not None else {}).get("run") or []
    return values[0].decode() if values and isinstance(values[0], bytes) else None


def _register_pages() -> None:
    try:
        from distributed.dashboard import scheduler as dashboard
    except ImportError:  # no (suitable) Bokeh: the scheduler has no dashboard at all
        return
    for path in PAGE_FIGURES:
        dashboard.applications.setdefault(path, functools.partial(_page, path))


_register_pages()


def dask_setup(scheduler) -> None:
    install(scheduler)
