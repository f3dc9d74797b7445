"""The notebook side: ``%dtrain`` magics, background runs, live charts and panels.

Names are imported on first use, so that code needing only the charts (the dashboard pages on a
scheduler) does not pull in IPython and ipywidgets.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

_WHERE = {
    "BackgroundRun": "workbench.notebook.background_run",
    "RunTable": "workbench.notebook.background_run",
    "WorkbenchMagics": "workbench.notebook.magics",
    "load_ipython_extension": "workbench.notebook.magics",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'workbench.notebook' has no attribute {name!r}")
    return getattr(import_module(_WHERE[name]), name)
