"""The shape shared by every strategy whose devices are Dask workers: it describes, as a
:class:`~workbench.parallel.device_run.DevicePlan`, what each device builds once and runs each
step; :func:`~workbench.parallel.device_run.run_on_devices` does the rest (cluster, setup,
steps, gathering the variables, cleanup).
"""

from __future__ import annotations

import time
from abc import abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

from workbench.config import RunConfig
from workbench.costs import Calibration
from workbench.events import EventLog
from workbench.parallel.device_run import DevicePlan, run_on_devices
from workbench.runtime.cluster import ClusterSession
from workbench.strategies.definition import StrategyDefinition
from workbench.training.calibration import add_to_calibration, calibrate_run
from workbench.training.job import Progress, TrainingJob
from workbench.training.session import TrainingSession


class ClusterStrategy(StrategyDefinition):
    """A strategy run on a cluster: subclasses give the plan (and, if devices belong to
    several TF jobs, the jobs)."""

    def jobs(self, config: RunConfig) -> tuple[tuple[str, int], ...] | None:
        """Devices per TF job, e.g. ``(("worker", 2), ("ps", 1))``; None: all workers."""
        return None

    def device_count(self, config: RunConfig) -> int:
        return config.devices

    def elastic(self, config: RunConfig) -> bool:
        """Whether the run may go on with fewer devices (its plan re-shards the batch)."""
        return False

    @abstractmethod
    def plan(
        self, config: RunConfig, job: TrainingJob, session: ClusterSession, progress: Progress
    ) -> DevicePlan:
        """What each device of ``session`` sets up and runs each step."""

    def _calibrated(
        self, job: TrainingJob, session: ClusterSession, progress: Progress
    ) -> ClusterSession:
        """``session``, its devices calibrated once for the run (before the first plan: the
        placer reads the costs)."""
        if job.calibration is None:
            calibrate_run(
                job,
                self.device_batch_sizes(job.config),
                progress,
                session,
                wires=self.wires,
                link_sizes=self.link_sizes(job.config, session.device_type),
            )
        return session

    def _measure_more(
        self,
        job: TrainingJob,
        session: ClusterSession,
        progress: Progress,
        keys: Sequence[str],
        measure: Callable[[list[str]], dict[str, Any]],
    ) -> None:
        """Adds to the run's calibration what ``measure(missing keys)`` times beyond nodes
        and links (a strategy's own exchanges, as its devices run them, under
        :func:`~workbench.costs.collective_key`; it returns :class:`Calibration` fields),
        unless the run does not calibrate or every one of ``keys`` is cached."""
        calibration = job.calibration
        if calibration is None or job.config.no_calibrate:
            return
        missing = [key for key in keys if not calibration.has_measured(key)]
        if not missing:
            return
        started = time.perf_counter()
        fields = measure(missing)
        add_to_calibration(
            job,
            session,
            Calibration(
                calibration.signature,
                tuple(session.device_names),
                **fields,
                measured_seconds=time.perf_counter() - started,
            ),
            progress,
        )

    def train(
        self, config: RunConfig, job: TrainingJob, log: EventLog, progress: Progress
    ) -> TrainingSession:
        return run_on_devices(
            self.name,
            job,
            log,
            progress,
            self.device_count(config),
            lambda session: self.plan(
                config, job, self._calibrated(job, session, progress), progress
            ),
            self.jobs(config),
            elastic=self.elastic(config),
        )
