"""Loaded in every worker process of a cluster the workbench starts on this machine (a Dask
preload): the worker computes at a lower scheduling priority than the processes around it.

A run's workers keep every core busy. Without this, the notebook's kernel (which drives the
steps and serves the run's dashboard pages), the Jupyter server and the browser wait for a
core like any worker, and every live view of the run freezes for a second at a time. A lower
priority changes nothing while nothing else wants a core (docs/jupyterlab.md, "Notebook
panel"). Clusters the workbench joins keep the priority their owner gave them.
"""

from __future__ import annotations

import os

LOCAL_WORKER_NICENESS = 10  # added to the niceness the worker was started with (at most 19)


def dask_setup(worker) -> None:
    """Called by the worker at start, on its event loop's thread: the threads it starts later
    (the one that runs the tasks among them) inherit the niceness."""
    os.nice(LOCAL_WORKER_NICENESS)
