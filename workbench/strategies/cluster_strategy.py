"""The shape shared by every strategy whose devices are Dask workers: it describes, as a
:class:`~workbench.parallel.device_run.DevicePlan`, what each device builds once and runs each
step; :func:`~workbench.parallel.device_run.run_on_devices` does the rest (cluster, setup,
steps, gathering the variables, cleanup).
"""

from __future__ import annotations

import time
from abc import abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from workbench.calibration.run_start import RunCalibration, add_to_calibration, calibrate_run
from workbench.config import RunConfig
from workbench.costs import Calibration
from workbench.events import EventLog
from workbench.parallel.device_run import DevicePlan, run_on_devices
from workbench.runtime.cluster import ClusterSession
from workbench.strategies.definition import StrategyDefinition
from workbench.training.job import Progress, RestorePoint, TrainingJob, TrainOutcome

Known = RunCalibration | None  # the run's calibration so far (None: none yet)


@dataclass(frozen=True)
class PlanContext:
    """Where a plan is made: the cluster ``session`` whose devices it uses, the run's
    ``progress`` lines, the ``restore`` point its devices start from (the run's start, or the
    checkpoint a recovery goes on from) and what the devices were measured to cost
    (``calibration``; None: not calibrated)."""

    session: ClusterSession
    progress: Progress
    restore: RestorePoint
    calibration: Calibration | None = None


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
    def plan(self, config: RunConfig, job: TrainingJob, at: PlanContext) -> DevicePlan:
        """What each device of ``at.session`` sets up and runs each step (see
        :class:`PlanContext`)."""

    def _calibrated(
        self, job: TrainingJob, session: ClusterSession, progress: Progress, so_far: Known
    ) -> RunCalibration:
        """The run's calibration with ``session``'s devices in it: measured once for the run
        (before the first plan: the placer reads the costs), ``so_far`` after that."""
        if so_far is not None:
            return so_far
        return calibrate_run(
            job,
            self.device_batch_sizes(job.config),
            progress,
            session,
            wires=self.wires,
            link_sizes=self.link_sizes(job.config, session.device_type),
        )

    def _measure_more(
        self,
        job: TrainingJob,
        session: ClusterSession,
        progress: Progress,
        keys: Sequence[str],
        measure: Callable[[list[str]], dict[str, Any]],
        so_far: RunCalibration,
    ) -> RunCalibration:
        """Adds to the run's calibration what ``measure(missing keys)`` times beyond nodes
        and links (a strategy's own exchanges, as its devices run them, under
        :func:`~workbench.costs.collective_key`; it returns :class:`Calibration` fields),
        unless the run does not calibrate or every one of ``keys`` is cached."""
        calibration = so_far.calibration
        if calibration is None or job.config.no_calibrate:
            return so_far
        missing = [key for key in keys if not calibration.has_measured(key)]
        if not missing:
            return so_far
        started = time.perf_counter()
        fields = measure(missing)
        return add_to_calibration(
            so_far,
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
    ) -> TrainOutcome:
        calibrated: list[RunCalibration] = []  # this run's, newest last (recoveries plan again)

        def make_plan(session: ClusterSession, restore: RestorePoint) -> DevicePlan:
            so_far = self._calibrated(
                job, session, progress, calibrated[-1] if calibrated else None
            )
            calibrated.append(so_far)
            return self.plan(
                config, job, PlanContext(session, progress, restore, so_far.calibration)
            )

        outcome = run_on_devices(
            self.name,
            job,
            log,
            progress,
            self.device_count(config),
            make_plan,
            self.jobs(config),
            elastic=self.elastic(config),
        )
        last = calibrated[-1] if calibrated else RunCalibration()
        return replace(outcome, calibration=last.calibration, calibration_seconds=last.seconds)
