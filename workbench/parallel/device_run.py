"""The life of a run whose devices keep state between tasks, shared by every distributed
strategy: start the cluster, build each device's part once (setup tasks), drive the steps,
gather the variables, clean up — and close the cluster whatever happens.

A strategy describes only what differs, as a :class:`DevicePlan`: which task function sets up
which device with which spec, which function runs K steps (and with what arguments), and which
devices hold the final variables.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from workbench.events import EventLog
from workbench.parallel.dispatch import submit_each, wait_all
from workbench.parallel.step_loop import drive_steps
from workbench.runtime.cluster import ClusterSession, start_cluster
from workbench.runtime.worker_service import device_service
from workbench.training.job import Progress, TrainingJob, evaluate_on_test
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


def snapshot_device(run_id: str) -> dict:
    """Task: the device's variables and optimizer slots (and any events it kept)."""
    return device_service().runs[run_id].snapshot()


def drop_device_state(run_id: str) -> None:
    """Task: forget the run on this worker (its resident state and pending tensors)."""
    device_service().forget(run_id)


def run_on_devices(
    strategy: str,
    job: TrainingJob,
    log: EventLog,
    progress: Progress,
    devices: int,
    make_plan: Callable[[ClusterSession], DevicePlan],
    jobs: tuple[tuple[str, int], ...] | None = None,
) -> TrainingSession:
    config = job.config
    deadline = config.stall_timeout + 120
    scheduler_options: dict = {}
    for observer in job.observers:
        scheduler_options.update(observer.scheduler_options())
    with (
        start_cluster(
            devices,
            job.device_type,
            config.cluster,
            jobs=jobs,
            scheduler_options=scheduler_options,
            protocol=config.protocol,
        ) as session,
        contextlib.ExitStack() as watching,  # left before the cluster closes
    ):
        for observer in job.observers:  # e.g. events -> the dashboard's pages
            watching.enter_context(observer.watch(session, strategy, job, log, progress))
        job.device_type = session.device_type  # decided by the workers' reports
        job.dashboard_link = session.dashboard_link
        job.scheduler_address = getattr(session.client.scheduler, "address", None)
        if session.dashboard_link:
            progress(f"[{strategy}] Dask dashboard: {session.dashboard_link}")
        plan = make_plan(session)
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
                wait_all(session, ready, "setup", None, deadline, ranks=group.ranks)
            drive_steps(
                session,
                job,
                log,
                progress,
                strategy,
                plan.step_function,
                plan.step_arguments,
                ranks=plan.step_ranks,
            )
            snapshot = submit_each(
                session,
                strategy,
                "snapshot",
                None,
                snapshot_device,
                [(session.run_id,)] * len(plan.snapshot_ranks),
                ranks=plan.snapshot_ranks,
            )
            snapshots = wait_all(
                session,
                snapshot,
                "gathering variables",
                job.total_steps,
                deadline,
                ranks=plan.snapshot_ranks,
            )
        finally:
            cleanup = submit_each(
                session, strategy, "cleanup", None, drop_device_state, [(session.run_id,)] * devices
            )
            with contextlib.suppress(Exception):  # the cluster is closed next anyway
                wait_all(session, cleanup, "cleanup", None, deadline=10)
        for snapshot in snapshots:
            for event in snapshot.get("events", ()):
                log.phase(*event)
        host = TrainingSession(
            job.model, job.optimizer, job.sampler.batch_size, config.dtype, config.seed
        )
        host.load_state(
            {n: v for snapshot in snapshots for n, v in snapshot["parameters"].items()},
            {n: v for snapshot in snapshots for n, v in snapshot["optimizer_state"].items()},
        )
        # While the dashboard's pages still follow the run: the test point reaches them too.
        evaluate_on_test(job, host, log)
    return host
