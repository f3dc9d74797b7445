"""The workbench's pages on the Dask scheduler's dashboard (``/individual-workbench-loss``,
``-utilization``, ``-timeline``, ``-memory``), drawn from the run's events only
(docs/architecture/events.md, "Events").

What flows where::

    client: EventLog ──publisher (thread, <= 4 batches/s)──► scheduler comm handler
    scheduler: RunBoard (recent runs, bounded) ──pages (Bokeh, <= 5 refreshes/s)──► browser

- :mod:`~workbench.dashboard.preload` is a scheduler preload: importing it registers the pages,
  its ``dask_setup`` installs the board and the handlers (:mod:`~workbench.dashboard.handlers`).
  Clusters the workbench starts get it (:func:`scheduler_options`); an existing scheduler is
  started with ``dask scheduler --preload workbench.dashboard.preload``.
- :mod:`~workbench.dashboard.run_board` is plain state: events by run with sequence numbers.
- :mod:`~workbench.dashboard.pages` reuses the notebook's ``LiveCharts`` over a copy of the
  board's events; a page follows the newest run, or with ``?run=<run id>`` the run the sidebar
  and the CLI call so, and says how far it is (``step N/M``).
- :mod:`~workbench.dashboard.publisher` never blocks or fails training: a scheduler without the
  preload gets one warning line and no pages.

On a cluster the workbench starts, the pages, like the rest of its dashboard, answer only the
link shown to the user, which carries the cluster's token (``workbench.runtime.dashboard_guard``,
docs/security/dashboard.md).
"""

from __future__ import annotations

from workbench.dashboard.handlers import PRELOAD
from workbench.dashboard.publisher import EventPublisher, publish_run, publishing
from workbench.dashboard.run_board import RunBoard


def scheduler_options() -> dict:
    """Scheduler keyword arguments adding the workbench preload to the configured ones.

    Examples
    --------
    >>> scheduler_options()["preload"][-1]
    'workbench.dashboard.preload'
    """
    import dask

    preloads = dask.config.get("distributed.scheduler.preload", default=None) or []
    preloads = [preloads] if isinstance(preloads, str) else list(preloads)
    if PRELOAD in preloads:
        return {}
    options = {"preload": [*preloads, PRELOAD]}
    argv = dask.config.get("distributed.scheduler.preload-argv", default=None) or []
    if argv and not isinstance(argv[0], str):  # one argument list per preload: ours takes none
        options["preload_argv"] = [*argv, []]
    return options


class DashboardObserver:
    """Puts a cluster run on the scheduler's dashboard pages: a cluster the workbench starts
    gets the pages' preload, and the run's events are published while it trains, under the
    run's store id once the run store records it (``job.run_id``: what ``?run=`` takes) (a
    :class:`~workbench.training.job.ClusterObserver`, attached by ``workbench.launch``)."""

    def scheduler_options(self) -> dict:
        return scheduler_options()

    def watch(self, session, strategy: str, job, log, progress):
        return publish_run(session, strategy, job, log, progress)


__all__ = [
    "PRELOAD",
    "DashboardObserver",
    "EventPublisher",
    "RunBoard",
    "publish_run",
    "publishing",
    "scheduler_options",
]
