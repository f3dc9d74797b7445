"""Showing the workbench's widgets in a notebook.

``jupyter_bokeh``'s widget draws with BokehJS, which must already be on the page; Bokeh's
``output_notebook`` puts it there. It is loaded inline (no CDN: the workbench never reaches
the network) and once per kernel, the first time anything with a chart is shown.
"""

from __future__ import annotations

from typing import Any

_loaded = False


def ensure_bokehjs() -> None:
    global _loaded
    if _loaded:
        return
    from bokeh.io import output_notebook
    from bokeh.resources import INLINE

    output_notebook(INLINE, hide_banner=True)
    _loaded = True


def show(widget: Any) -> None:
    """Display ``widget`` (an ipywidget that may hold charts) in the current cell."""
    from IPython.display import display

    ensure_bokehjs()
    display(widget)
