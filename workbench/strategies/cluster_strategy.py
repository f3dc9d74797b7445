"""The shape shared by every strategy whose devices are Dask workers: it describes, as a
:class:`~workbench.parallel.device_run.DevicePlan`, what each device builds once and runs each
step; :func:`~workbench.parallel.device_run.run_on_devices` does the rest (cluster, setup,
steps, gathering the variables, cleanup).
"""

from __future__ import annotations

from abc import abstractmethod

from workbench.config import RunConfig
from workbench.events import EventLog
from workbench.parallel.device_run import DevicePlan, run_on_devices
from workbench.runtime.cluster import ClusterSession
from workbench.strategies.definition import StrategyDefinition
from workbench.training.calibration import calibrate_run
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
