"""Synchronous data parallelism, client side: one replica per device, lock-step steps.

Every replica computes gradients on its slice of the same global batch, the replicas all-reduce
them (the algorithm is the subclass's choice), and each applies the identical averaged update,
so the variables stay mirrored and equal the one-device result (DESIGN 3.2). A step is as slow
as the slowest replica: that is the price of synchronous updates.
"""

from __future__ import annotations

import contextlib

from workbench.events import EventLog
from workbench.parallel.collectives import even_groups
from workbench.parallel.dispatch import submit_each, wait_all
from workbench.parallel.gradient_worker import WorkerSpec
from workbench.parallel.replica import (
    ReplicaSpec,
    drop_replica,
    replica_snapshot,
    run_replica_steps,
    setup_replica,
)
from workbench.parallel.step_loop import drive_steps
from workbench.runtime.cluster import start_cluster
from workbench.training.job import Progress, TrainingJob
from workbench.training.session import TrainingSession


def worker_spec(
    session, job: TrainingJob, rank: int, replicas: int, reads_own_data: bool = True
) -> WorkerSpec:
    return WorkerSpec(
        run_id=session.run_id,
        config=job.config.to_dict(),
        rank=rank,
        replicas=replicas,
        addresses=tuple(session.addresses),
        device_names=tuple(session.device_names),
        clock_origin=job.clock_origin,
        total_steps=job.total_steps,
        model=job.model,
        reads_own_data=reads_own_data,
        initial_parameters=job.initial_parameters,
        initial_optimizer_state=job.initial_optimizer_state,
    )


class DataParallelStrategy:
    name = "data-parallel"
    central_storage = False

    def __init__(self, config) -> None:
        self.config = config

    def algorithm(self) -> str:
        return self.config.allreduce

    def group_count(self) -> int:
        """Groups for hierarchical all-reduce when the devices share one host."""
        return 2

    def groups(self, addresses: list[str]) -> tuple[tuple[int, ...], ...]:
        """Ranks grouped by host; on a single host, ``group_count`` even groups."""
        hosts: dict[str, list[int]] = {}
        for rank, address in enumerate(addresses):
            hosts.setdefault(address.rsplit(":", 1)[0], []).append(rank)
        if len(hosts) > 1:
            return tuple(tuple(ranks) for ranks in hosts.values())
        return tuple(tuple(g) for g in even_groups(len(addresses), self.group_count()))

    def device_names(self, device_type: str) -> list[str]:
        from workbench.runtime import device_name

        return [device_name(device_type, task=rank) for rank in range(self.config.devices)]

    def train(self, job: TrainingJob, log: EventLog, progress: Progress) -> TrainingSession:
        config = self.config
        with start_cluster(config.devices, job.device_type, config.cluster) as session:
            if session.dashboard_link:
                progress(f"[{self.name}] Dask dashboard: {session.dashboard_link}")
            replicas = len(session.addresses)
            specs = [
                (
                    ReplicaSpec(
                        worker=worker_spec(session, job, rank, len(session.addresses)),
                        stall_timeout=config.stall_timeout,
                        algorithm=self.algorithm(),
                        groups=self.groups(session.addresses),
                        central_storage=self.central_storage,
                        bucket_bytes=int(config.bucket_mb * 2**20),
                        compression=config.compression,
                    ),
                )
                for rank in range(len(session.addresses))
            ]
            setup = submit_each(session, self.name, "setup", None, setup_replica, specs)
            wait_all(session, setup, "setup", None, deadline=config.stall_timeout + 120)
            try:
                drive_steps(
                    session,
                    job,
                    log,
                    progress,
                    self.name,
                    run_replica_steps,
                    lambda step, count: [(session.run_id, step, count)] * replicas,
                )
                snapshot = wait_all(
                    session,
                    [
                        session.client.submit(
                            replica_snapshot,
                            session.run_id,
                            workers=[session.addresses[0]],
                            pure=False,
                        )
                    ],
                    "gathering variables",
                    job.total_steps,
                    deadline=config.stall_timeout,
                )[0]
            finally:
                cleanup = submit_each(
                    session,
                    self.name,
                    "cleanup",
                    None,
                    drop_replica,
                    [(session.run_id,)] * len(session.addresses),
                )
                with contextlib.suppress(Exception):  # the cluster is closed next anyway
                    wait_all(session, cleanup, "cleanup", None, deadline=10)
        host = TrainingSession(
            job.model, job.optimizer, job.sampler.batch_size, config.dtype, config.seed
        )
        host.load_state(snapshot["parameters"], snapshot["optimizer_state"])
        return host
