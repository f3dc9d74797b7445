"""The life of a run whose devices keep state between tasks, shared by every distributed
strategy: start the cluster, build each device's part once (setup tasks), drive the steps
(checkpointing periodically), gather the variables, clean up — and close the cluster whatever
happens. When a device fails, every device is restored from the last checkpoint on the
workers that are back (or, elastic, on fewer), up to ``--max-restarts`` times.

A strategy describes only what differs, as a :class:`DevicePlan`: which task function sets up
which device with which spec, which function runs K steps (and with what arguments), and which
devices hold the final variables.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from workbench.events import EventLog
from workbench.events.records import Phase, PhaseEvent, StepReport
from workbench.parallel.dispatch import (
    DeviceFailure,
    StoppedInFault,
    StopRequested,
    submit_each,
    wait_all,
)
from workbench.parallel.loop_run import LoopRun, RoundHooks, StepTasks
from workbench.parallel.periodic_checkpoints import PeriodicCheckpoints
from workbench.parallel.recovery import devices_after_failure, elastic_device_count, forget_runs
from workbench.parallel.step_loop import drive_steps
from workbench.parallel.stop_gate import DevicesUnreachable, run_on_workers
from workbench.parallel.stop_gate import forget as forget_stop
from workbench.runtime.cluster import (
    ClusterSession,
    ordered_workers,
    ships_dataset,
    start_run_cluster,
)
from workbench.runtime.devices import device_name
from workbench.runtime.host_dataset import stage_dataset
from workbench.runtime.worker_service import device_service
from workbench.safe_io import ForeignPathError
from workbench.training.job import (
    FaultRecord,
    Progress,
    RestorePoint,
    TrainingJob,
    TrainOutcome,
    evaluate_on_test,
)
from workbench.training.session import TrainingSession


@dataclass
class SetupGroup:
    function: Callable
    specs: Sequence[Any]  # one spec per rank in ``ranks``
    ranks: Sequence[int]


@dataclass
class DevicePlan:
    setups: Sequence[SetupGroup]  # run one group after the other (shards before workers)
    step_function: Callable
    step_arguments: Callable[[int, int], Sequence[tuple]]
    step_ranks: Sequence[int]
    snapshot_ranks: Sequence[int]
    # Replaces the client's chunked step loop (free-running parameter-server workers), taking
    # what :func:`~workbench.parallel.step_loop.drive_steps` takes but the step tasks.
    driver: Callable[[ClusterSession, LoopRun, int, RoundHooks], None] | None = None
    # (variables, slots) from the snapshot devices' reports; a strategy whose devices hold
    # pieces of variables (partitioned parameter-server variables) joins them here.
    merge: Callable[[Sequence[dict]], tuple[dict, dict]] = field(
        default=lambda snapshots: merged_state(snapshots)
    )

    @classmethod
    def uniform(
        cls,
        session: ClusterSession,
        setup: Callable,
        specs: Sequence[Any],
        step_function: Callable,
        snapshot_ranks: Sequence[int],
    ) -> DevicePlan:
        """The common plan: one setup per device (spec i for rank i), every device running
        the same step task with ``(run id, first step, count)``."""
        ranks = range(len(specs))
        return cls(
            setups=[SetupGroup(setup, specs, ranks)],
            step_function=step_function,
            step_arguments=lambda step, count: [(session.run_id, step, count)] * len(ranks),
            step_ranks=ranks,
            snapshot_ranks=snapshot_ranks,
        )


def stage_run_dataset(session: ClusterSession, job: TrainingJob, progress: Progress) -> None:
    """Hold the run's data set once per host on the session's workers, before their setup
    (:mod:`workbench.runtime.host_dataset`): loaded by each host, or sent by this client."""
    config = job.config
    shipped = job.dataset if ships_dataset(config) else None
    try:
        stage_dataset(
            session.client,
            session.run_id,
            session.addresses,
            config.dataset,
            config.seed,
            shipped,
            progress,
        )
    except ForeignPathError as error:
        # Another user's object where the run keeps its shared memory: a retry would meet
        # it again (docs/security/shared-memory.md).
        raise DeviceFailure(f"staging the data set failed: {error}", recoverable=False) from None


def snapshot_device(run_id: str) -> dict:
    """Task: the device's variables and optimizer slots (and any events it kept)."""
    return device_service().runs[run_id].snapshot()


def drop_device_state(run_id: str) -> None:
    """Task: forget the run on this worker (its resident state and pending tensors)."""
    device_service().forget(run_id)
    forget_stop(run_id)


def run_on_devices(
    strategy: str,
    job: TrainingJob,
    log: EventLog,
    progress: Progress,
    devices: int,
    make_plan: Callable[[ClusterSession, RestorePoint], DevicePlan],
    jobs: tuple[tuple[str, int], ...] | None = None,
    elastic: bool = False,
) -> TrainOutcome:
    """Train ``job`` on ``devices`` cluster devices as ``make_plan(session, restore)`` says
    (``restore``: where the devices start, the run's start or, after a failure, the last
    checkpoint), checkpointing periodically and recovering from failed devices
    (:mod:`workbench.parallel.recovery`);
    ``elastic``: the plan re-shards the global batch over however many devices it is given."""
    config = job.config
    deadline = config.stall_timeout + 120
    scheduler_options: dict = {}
    for observer in job.observers:
        scheduler_options.update(observer.scheduler_options())
    with (
        start_run_cluster(
            config,
            devices,
            job.device_type,
            jobs=jobs,
            scheduler_options=scheduler_options,
            progress=progress,
        ) as session,
        contextlib.ExitStack() as watching,  # left before the cluster closes
    ):
        # e.g. events -> the dashboard's pages; the run's record notes the cluster
        for observer in job.observers:
            watching.enter_context(observer.watch(session, strategy, job, log, progress))
        if session.dashboard_link:
            progress(f"[{strategy}] Dask dashboard: {session.dashboard_link}")
        faults = FaultRecord()
        attempt = Attempt(strategy, job, log, progress, session, make_plan, deadline, faults)
        names = list(session.device_names)
        state = None  # (variables, slots) where the devices cannot hand theirs over
        stopped_in_fault = False
        while True:
            try:
                snapshots = attempt.run(grow_to=devices if elastic else None)
                break
            except Regroup:
                continue  # at a checkpoint just written: nothing to recompute
            except StoppedInFault as stopped:
                if stopped.reason is not None:
                    attempt.record_failure(stopped, "stopping")
                state, stopped_in_fault = attempt.stopped_in_fault(), True
                break
            except DeviceFailure as failure:
                gives_up = faults.restarts >= config.max_restarts or not failure.recoverable
                if job.stop.is_set():  # asked to stop: no new attempt
                    attempt.record_failure(failure, "stopping")
                    state, stopped_in_fault = attempt.stopped_in_fault(), True
                    break
                if gives_up:
                    attempt.record_failure(failure, "ending")
                    attempt.clean_up()
                    raise
                noticed = attempt.record_failure(failure, "restoring")
                try:
                    devices_after_failure(
                        session,
                        failure,
                        devices,
                        config.replacement_timeout,
                        config.batch_size if elastic else None,
                        lambda count: names if count == devices else _worker_names(session, count),
                        job.stop,
                    )
                except StopRequested:
                    state, stopped_in_fault = attempt.stopped_in_fault(), True
                    break
                if job.stop.is_set():
                    state, stopped_in_fault = attempt.stopped_in_fault(), True
                    break
                attempt.restore(noticed, failure)
        faults.devices = len(session.addresses)
        host = TrainingSession(
            job.model, job.optimizer, job.sampler.batch_size, config.dtype, config.seed
        )
        if state is None:
            for snapshot in snapshots:
                for event in snapshot.get("events", ()):
                    log.emit(event)
            state = attempt.plan.merge(snapshots)
        if state[0] is not None:  # None: the run's fresh initialisation, as the host's
            host.load_state(*state)
        if stopped_in_fault:  # its variables are its restart point's, not its last step's
            host.variables_step = attempt.checkpoints.step
        # While the dashboard's pages still follow the run: the test point reaches them too.
        test_result = evaluate_on_test(job, host, log)
        return TrainOutcome(host, session.device_type, faults, test_result=test_result)


def _worker_names(session: ClusterSession, count: int) -> list[str]:
    return [device_name(session.device_type, task=task) for task in range(count)]


def merged_state(snapshots: Sequence[dict]) -> tuple[dict, dict]:
    """(variables, optimizer slots) from the devices that hold them."""
    return (
        {n: v for snapshot in snapshots for n, v in snapshot["parameters"].items()},
        {n: v for snapshot in snapshots for n, v in snapshot["optimizer_state"].items()},
    )


class Regroup(Exception):
    """An elastic run found more workers at a checkpoint boundary: set up again on them."""


class Attempt:
    """One go at the run on the session's current devices, from ``first`` (the run's first
    step, or the checkpoint a recovery restarts from) to the end."""

    def __init__(self, strategy, job, log, progress, session, make_plan, deadline, faults) -> None:
        self.strategy, self.job, self.log, self.progress = strategy, job, log, progress
        self.session, self.make_plan, self.deadline = session, make_plan, deadline
        self.faults = faults  # what the run's failures cost: the run's outcome reports it
        self.checkpoints = PeriodicCheckpoints(job)
        self.start = RestorePoint.start_of(job)  # where the next plan starts the devices
        self.first = self.start.step
        self.noticed: float | None = None  # when the failure being recovered from was seen

    def run(self, grow_to: int | None) -> list[dict]:
        session, strategy, job = self.session, self.strategy, self.job
        stage_run_dataset(session, job, self.progress)
        plan = self.make_plan(session, self.start)
        self.plan = plan
        try:
            for group in plan.setups:
                ready = submit_each(
                    session,
                    strategy,
                    "setup",
                    None,
                    group.function,
                    [(spec,) for spec in group.specs],
                    ranks=group.ranks,
                )
                wait_all(session, ready, "setup", self.first, self.deadline, ranks=group.ranks)

            run = LoopRun.of(job, self.log, self.progress, strategy)
            hooks = _AttemptRounds(self, grow_to)
            if plan.driver is not None:
                plan.driver(session, run, self.first, hooks)
            else:
                tasks = StepTasks(plan.step_function, plan.step_arguments, plan.step_ranks)
                drive_steps(session, run, tasks, self.first, hooks)
            snapshots = self.gather(job.total_steps)
        except DeviceFailure:
            raise  # the workers are restarted (recovery) or cleaned up (the run fails)
        except StoppedInFault:
            self.forget_at_once()  # a stalled device would hold a cleanup task up
            raise
        except BaseException:
            self.clean_up()
            raise
        self.clean_up()
        return snapshots

    def checkpoint(self, step: int, grow_to: int | None) -> None:
        """Save the devices' state at ``step``; an elastic run then takes workers that joined."""
        self.checkpoints.save(step, *self.plan.merge(self.gather(step)))
        if grow_to is not None and len(self.session.addresses) < grow_to:
            self._grow(step, grow_to)

    def gather(self, step: int) -> list[dict]:
        """Every snapshot device's variables and slots (and the events it kept)."""
        ranks = self.plan.snapshot_ranks
        futures = submit_each(
            self.session,
            self.strategy,
            "snapshot",
            step,
            snapshot_device,
            [(self.session.run_id,)] * len(ranks),
            ranks=ranks,
        )
        snapshots = wait_all(
            self.session, futures, "gathering variables", step, self.deadline, ranks=ranks
        )
        if step < self.job.total_steps:  # a checkpoint: log what the devices kept so far
            for snapshot in snapshots:
                for event in snapshot.pop("events", ()):
                    self.log.emit(event)
        return snapshots

    def clean_up(self) -> None:
        session = self.session
        cleanup = submit_each(
            session,
            self.strategy,
            "cleanup",
            None,
            drop_device_state,
            [(session.run_id,)] * len(session.addresses),
        )
        with contextlib.suppress(Exception):  # the cluster is closed next anyway
            wait_all(session, cleanup, "cleanup", None, deadline=10)

    def forget_at_once(self) -> None:
        """Drop the run's state on its workers without waiting for their task threads."""
        session = self.session
        with contextlib.suppress(DevicesUnreachable):
            run_on_workers(session.client, forget_runs, ([session.run_id],), session.addresses, 2.0)

    def record_failure(self, failure: DeviceFailure | StoppedInFault, then: str) -> float:
        """Log ``failure``'s event, with its reason, and say what follows: ``restoring`` from
        the checkpoint, ``ending`` the run (no restart left, or one would fail again), or
        ``stopping`` it as asked. Returns when it was noticed."""
        noticed = self.job.clock()
        step = failure.step if failure.step is not None else self.first
        device = getattr(failure, "device", None) or "cluster"
        reason = failure.reason or str(failure)
        self.log.emit(PhaseEvent(device, Phase.FAILURE, step, noticed, noticed, reason=reason))
        follows = {
            "restoring": "restoring every device from the checkpoint at step "
            f"{self.checkpoints.step}",
            "ending": "the run fails",
            "stopping": "the run stops, as asked",
        }[then]
        self.progress(f"[{self.strategy}] {failure}; {follows}")
        return noticed

    def stopped_in_fault(self) -> tuple[dict | None, dict | None]:
        """The variables and slots of a run stopped during a fault (its devices cannot hand
        theirs over): its restart point's, the newest checkpoint or where it started."""
        _, parameters, slots = self.checkpoints.restart_point()
        self.progress(
            f"[{self.strategy}] stopped during a fault: the variables are those of step "
            f"{self.checkpoints.step} (the last checkpoint, or where the run started)"
        )
        return parameters, slots

    def restore(self, noticed: float, failure: DeviceFailure) -> None:
        """Go on from the last checkpoint on the session's (new) devices."""
        job, faults = self.job, self.faults
        faults.restarts += 1
        self.log.scalar("restarts", self.checkpoints.step, faults.restarts, job.clock())
        self._from_checkpoint()
        if failure.step is not None:
            faults.steps_recomputed += max(0, failure.step - self.first)
        self.noticed = noticed

    def _note_recovered(self, first: int, results: list[StepReport]) -> None:
        """After a restore, the first round's start is the end of the recovery."""
        if self.noticed is None:
            return
        starts = [event.start for result in results for event in result["events"]]
        resumed = min(starts) if starts else self.job.clock()
        for device in self.session.device_names:
            self.log.phase(device, Phase.RECOVERY, first, self.noticed, resumed)
        seconds = resumed - self.noticed
        self.faults.recovery_seconds.append(seconds)
        self.log.scalar("recovery_seconds", first, seconds, self.job.clock())
        self.progress(
            f"[{self.strategy}] recovered on {len(self.session.addresses)} devices in "
            f"{seconds:.1f}s; going on from step {first}"
        )
        self.noticed = None

    def _grow(self, step: int, grow_to: int) -> None:
        """An elastic run on fewer devices takes workers that joined, at a checkpoint."""
        session, job = self.session, self.job
        workers = ordered_workers(session.client)[:grow_to]
        count = elastic_device_count(len(workers), job.config.batch_size)
        if count <= len(session.addresses):
            return
        self.clean_up()
        self.progress(f"[{self.strategy}] {count} devices available again at step {step}")
        session.rebind(workers[:count], _worker_names(session, count))
        self._from_checkpoint()
        raise Regroup

    def _from_checkpoint(self) -> None:
        """The next attempt starts from the newest checkpoint (its plan is made from it)."""
        self.start = RestorePoint(*self.checkpoints.restart_point())
        self.first = self.start.step


@dataclass(frozen=True)
class _AttemptRounds:
    """An attempt's rounds pause where a checkpoint is due (decided when the round ending
    there is sent, so no round is ahead of the devices when their snapshot is taken); after a
    restore, the first round marks the end of the recovery."""

    attempt: Attempt
    grow_to: int | None  # an elastic run's device count to grow to at a checkpoint

    def steps_until_pause(self, step: int) -> int | None:
        return self.attempt.checkpoints.steps_until_due(step)

    def pause_at(self, step: int) -> bool:
        return self.attempt.checkpoints.due(step)

    def at_pause(self, step: int) -> None:
        self.attempt.checkpoint(step, self.grow_to)

    def after_round(self, first: int, end: int, results: list) -> None:
        self.attempt._note_recovered(first, results)
