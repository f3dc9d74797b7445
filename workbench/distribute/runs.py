"""Starting a checked run, in a background thread or here: what ``fit`` and ``%dtrain`` do."""

from __future__ import annotations

from workbench.config import RunConfig
from workbench.launch.background_run import BackgroundRun
from workbench.launch.runner import run_training


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
    quiet = progress or (lambda line: None)
    return run_training(config, model=model, progress=quiet, dataset=dataset)
