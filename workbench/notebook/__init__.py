"""The notebook side: ``%dtrain`` magics and background runs (charts and panel build on the
same event log)."""

from workbench.notebook.background_run import BackgroundRun, RunTable
from workbench.notebook.magics import WorkbenchMagics, load_ipython_extension

__all__ = ["BackgroundRun", "RunTable", "WorkbenchMagics", "load_ipython_extension"]
