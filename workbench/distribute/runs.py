"""Starting a checked run, in a background thread or here: what ``fit`` and ``%dtrain`` do.
Either way the run is recorded in the run store (the sidebar lists it, with its status and
events, and can stop it), as ``dtrain run`` records its runs (docs/architecture/run-lifecycle.md,
"The life of a ``dtrain run``")."""

from __future__ import annotations

from workbench.config import RunConfig
from workbench.events import EventLog
from workbench.launch.background_run import BackgroundRun
from workbench.launch.run_link import RunLink, new_run_id
from workbench.launch.runner import RunResult, prepare_run
from workbench.store import RunStore


def start(
    config: RunConfig,
    model=None,
    background: bool = True,
    progress=None,
    panel: bool = False,
    dataset=None,
):
    """Start a checked run: in a background thread (a ``BackgroundRun``) or here. With
    ``panel``, the run's live panel is built before training starts (it is costly to build,
    and would otherwise compete with the run's first seconds); the panel is the notebook's, so
    only a caller that has it (``%dtrain``) passes it, as ``panel``. ``dataset``: the data set
    of arrays given to ``fit`` (named by ``config.dataset``)."""
    if background:
        run = BackgroundRun(config, model=model, progress=progress, begin=False, dataset=dataset)
        if panel:
            run.panel()
        return run.begin()
    return train_recorded(config, model, progress or (lambda line: None), dataset)


def train_recorded(config: RunConfig, model, progress, dataset=None) -> RunResult:
    """Train here, recorded in the run store while it goes: its record ends finished, stopped
    (Ctrl-C, or a Stop asked from the sidebar) or failed, as a background run's does. Every
    error on user input is raised before anything is recorded."""
    prepared = prepare_run(config, model, dataset)
    run_id = new_run_id(prepared.config.strategy)
    link = RunLink(RunStore(), run_id, prepared.job, EventLog()).start()
    return link.train(prepared, progress)
