"""Synchronous data parallelism, client side: one replica per device, lock-step steps.

Every replica computes gradients on its slice of the same global batch, the replicas all-reduce
them (the algorithm is the subclass's choice), and each applies the identical averaged update,
so the variables stay mirrored and equal the one-device result (DESIGN 3.2). A step is as slow
as the slowest replica: that is the price of synchronous updates.
"""

from __future__ import annotations

from workbench.events import EventLog
from workbench.parallel.collectives import even_groups
from workbench.parallel.device_run import DevicePlan, SetupGroup, run_on_devices
from workbench.parallel.gradient_worker import WorkerSpec
from workbench.parallel.replica import ReplicaSpec, run_replica_steps, setup_replica
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

        def plan(session) -> DevicePlan:
            ranks = range(len(session.addresses))
            specs = [
                ReplicaSpec(
                    worker=worker_spec(session, job, rank, len(ranks)),
                    stall_timeout=config.stall_timeout,
                    algorithm=self.algorithm(),
                    groups=self.groups(session.addresses),
                    central_storage=self.central_storage,
                    bucket_bytes=int(config.bucket_mb * 2**20),
                    compression=config.compression,
                )
                for rank in ranks
            ]
            return DevicePlan(
                setups=[SetupGroup(setup_replica, specs, ranks)],
                step_function=run_replica_steps,
                step_arguments=lambda step, count: [(session.run_id, step, count)] * len(ranks),
                step_ranks=ranks,
                snapshot_ranks=[0],  # mirrored: every replica holds the same variables
            )

        return run_on_devices(self.name, job, log, progress, config.devices, plan)
