"""Launching a run: the one flag parser, the checks and loading before anything starts
(``prepare_run``), training and summarising (``execute_run``), the run store record while it
trains (``RunLink``) and runs in a background thread (``BackgroundRun``).

What flows in: flags or a :class:`~workbench.config.RunConfig` (and optionally a model). What
flows out: a :class:`~workbench.launch.runner.RunResult` (the ``--json`` summary, the final
variables, the event log). The front ends (``cli``, ``notebook``, ``distribute``, ``bench``)
start every run through this layer; it attaches the dashboard's publisher to cluster runs.
"""

from workbench.launch.errors import USER_ERRORS
from workbench.launch.runner import PreparedRun, RunResult, execute_run, prepare_run, run_training

__all__ = ["USER_ERRORS", "PreparedRun", "RunResult", "execute_run", "prepare_run", "run_training"]
