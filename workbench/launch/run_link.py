"""A run training in this process, tied to its record in the run store while it goes.

What other processes see and do through the store (the JupyterLab sidebar, another kernel):
every event is recorded as it is emitted; a Stop asked through the store
(:meth:`~workbench.store.StoredRun.request_stop`) sets the job's stop flag, so the run ends after
the step in flight; as the run's cluster comes up, its dashboard link and scheduler address are
noted (the link watches the cluster like any of the job's observers); and the record is
finished with the run's state and summary. The notebook's background runs and ``dtrain run``
both train this way.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

from workbench.events import EventLog
from workbench.launch.runner import PreparedRun, RunResult, execute_run
from workbench.store import RunRecorder, RunStore
from workbench.training.job import Progress, TrainingJob

STORE_POLL_S = 0.25  # how soon a Stop asked through the store is seen


def new_run_id(strategy: str) -> str:
    """``<date>-<time>-<strategy>-<6 hex>``: sorts by start, says what it is, never repeats."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{strategy}-{uuid.uuid4().hex[:6]}"


class RunLink:
    """Records ``job``'s run (events of ``log``) as ``run_id`` in ``store``; :meth:`start`
    watches the store while it trains, :meth:`train` trains it and ends the record.
    ``dashboard_link``: the run's cluster's, once it is up (the panel links to it)."""

    def __init__(
        self,
        store: RunStore,
        run_id: str,
        job: TrainingJob,
        log: EventLog,
        recorder: RunRecorder | None = None,
    ) -> None:
        """``recorder``: the run's record made already (listed while the run was prepared)."""
        self.job, self.log = job, log
        self.recorder = recorder or store.create(
            run_id, job.config.to_dict(), steps=job.total_steps
        )
        self.dashboard_link: str | None = None
        log.subscribe(self.recorder.record)
        self._ended = threading.Event()
        self._watcher = threading.Thread(
            target=self._watch, name=f"dtrain-{run_id}-watch", daemon=True
        )

    def start(self) -> RunLink:
        self._watcher.start()
        return self

    def _watch(self) -> None:
        while not self._ended.wait(STORE_POLL_S):
            if self.recorder.run.stop_requested():
                self.job.stop.set()

    # As one of the job's cluster observers (ClusterObserver): told once the cluster is up.
    def scheduler_options(self) -> dict:
        return {}

    @contextlib.contextmanager
    def watch(self, session: Any, *_: Any) -> Iterator[None]:
        self.dashboard_link = session.dashboard_link
        self.recorder.annotate(
            dashboard_link=session.dashboard_link,
            scheduler_address=getattr(session.client.scheduler, "address", None),
        )
        yield

    def finish(self, state: str, summary: dict | None = None, error: str | None = None) -> None:
        """End the record: ``state`` is finished, stopped or failed."""
        self._ended.set()
        if self._watcher.is_alive():
            self._watcher.join()
        self.recorder.finish(state, summary=summary, error=error)

    def train(self, prepared: PreparedRun, progress: Progress) -> RunResult:
        """Train the prepared run and end its record as the run ends: finished, stopped (asked
        to, or interrupted with Ctrl-C) or failed; an error is re-raised after it is recorded."""
        run_id = self.recorder.run.run_id
        job = replace(
            prepared.job,
            # Periodic checkpoints go beside the run's events (the last two are kept).
            checkpoint_directory=str(self.recorder.run.path / "checkpoints"),
            run_id=run_id,  # its dashboard pages are named after it too
            observers=[*prepared.job.observers, self],
        )
        try:
            # Its TensorBoard folder, if any, is named like its record in the store.
            result = execute_run(replace(prepared, job=job), self.log, progress, run_id)
        except KeyboardInterrupt:
            self.finish("stopped", error="interrupted (Ctrl-C)")
            raise
        except BaseException as error:
            self.finish("failed", error=f"{type(error).__name__}: {error}")
            raise
        self.finish(ended_state(self.job, result.summary), summary=result.summary)
        return result


def ended_state(job: TrainingJob, summary: dict) -> str:
    """``stopped`` when the run was asked to stop before its last step, else ``finished`` (a
    Stop that came as the last step ran stopped nothing)."""
    completed = summary["first_step"] + summary["steps"]
    return "stopped" if job.stop.is_set() and completed < job.total_steps else "finished"
