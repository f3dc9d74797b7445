"""Launching a run: the one flag parser, the checks and loading before anything starts
(``prepare_run``), training and summarising (``execute_run``), the run store record while it
trains (``RunLink``) and runs in a background thread (``BackgroundRun``).

What flows in: flags or a :class:`~workbench.config.RunConfig` (and optionally a model). What
flows out: a :class:`~workbench.launch.runner.RunResult` (the ``--json`` summary, the final
variables, the event log). The front ends (``cli``, ``notebook``, ``distribute``, ``bench``)
start every run through this layer; it attaches the dashboard's publisher to cluster runs.
"""

from __future__ import annotations

from typing import Any

from workbench.launch.errors import USER_ERRORS

__all__ = ["USER_ERRORS", "PreparedRun", "RunResult", "execute_run", "prepare_run", "run_training"]


def __getattr__(name: str) -> Any:
    # The runner (and the cluster, Dask and TensorBoard behind it) is imported on first use,
    # so the flag parser in this package answers without them.
    if name in ("PreparedRun", "RunResult", "execute_run", "prepare_run", "run_training"):
        from workbench.launch import runner

        return getattr(runner, name)
    raise AttributeError(f"module 'workbench.launch' has no attribute {name!r}")
