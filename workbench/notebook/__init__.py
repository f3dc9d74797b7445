"""The notebook side: ``%dtrain`` magics, the live panel of a run, the form that starts runs,
the comparison view, the drawings of partitioned graphs and pipelines, and a run's step as
predicted beside the same step as measured (``compare_step``).

Importing ``workbench.notebook.panel`` registers the live panel as the view of a background
run (:func:`workbench.launch.background_run.register_run_viewer`); ``%load_ext workbench``
has it imported when a run is first shown. The names below are imported on first use, so
``%load_ext workbench`` waits neither for the widgets nor for the training engine.
"""

from __future__ import annotations

import importlib
from typing import Any

_NAMES = {
    "BackgroundRun": "workbench.launch.background_run",
    "RunTable": "workbench.launch.background_run",
    "RunPanel": "workbench.notebook.panel",
    "TrainingForm": "workbench.notebook.panel",
    "WorkbenchMagics": "workbench.notebook.magics",
    "compare_step": "workbench.notebook.step_view",
    "load_ipython_extension": "workbench.notebook.magics",
}

__all__ = sorted(_NAMES)


def __getattr__(name: str) -> Any:
    if name in _NAMES:
        return getattr(importlib.import_module(_NAMES[name]), name)
    raise AttributeError(f"module 'workbench.notebook' has no attribute {name!r}")
