"""The notebook side: ``%dtrain`` magics, the live panel of a run, the form that starts runs,
the comparison view, the drawings of partitioned graphs and pipelines, and a run's step as
predicted beside the same step as measured (``compare_step``).

Importing it registers the live panel as the view of a background run
(:func:`workbench.launch.background_run.register_run_viewer`).
"""

from __future__ import annotations

from workbench.launch.background_run import BackgroundRun, RunTable
from workbench.notebook.magics import WorkbenchMagics, load_ipython_extension
from workbench.notebook.panel import RunPanel, TrainingForm
from workbench.notebook.step_view import compare_step

__all__ = [
    "BackgroundRun",
    "RunPanel",
    "RunTable",
    "TrainingForm",
    "WorkbenchMagics",
    "compare_step",
    "load_ipython_extension",
]
