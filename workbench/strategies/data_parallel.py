"""Synchronous data parallelism, client side: one replica per device, lock-step steps.

Every replica computes gradients on its slice of the same global batch, the replicas all-reduce
them (the algorithm is the subclass's choice), and each applies the identical averaged update,
so the variables stay mirrored and equal the one-device result (docs/architecture.md, "Same
data, same result"). A step is as slow as the slowest replica: the price of synchronous
updates. The device side is :mod:`workbench.parallel.data_parallel.replica`.
"""

from __future__ import annotations

from workbench.config import ConfigError, RunConfig
from workbench.parallel.collectives import even_groups
from workbench.parallel.data_parallel.replica import ReplicaSpec, setup_replica
from workbench.parallel.device_run import DevicePlan
from workbench.parallel.resident_steps import run_resident_steps
from workbench.parallel.worker_spec import make_worker_spec
from workbench.runtime.cluster import ClusterSession
from workbench.strategies.cluster_strategy import ClusterStrategy
from workbench.strategies.definition import replicas_divide_the_batch
from workbench.training.job import Progress, TrainingJob


class DataParallel(ClusterStrategy):
    """The family base: mirrored, central storage and multi-worker mirrored differ only in
    how the replicas combine their gradients."""

    central_storage = False  # variables kept and updated on rank 0 only

    def algorithm(self, config: RunConfig, device_type: str) -> str:
        """The all-reduce algorithm (``--allreduce`` values) on ``device_type`` devices."""
        return "ring"

    def group_count(self, config: RunConfig) -> int:
        """Groups for hierarchical all-reduce when the devices share one host."""
        return 2

    def compression(self, config: RunConfig) -> str:
        """The ``--compression`` value (validated, canonical) for the strategies that take it."""
        return config.options.get("compression", "none")

    def groups(self, config: RunConfig, addresses: list[str]) -> tuple[tuple[int, ...], ...]:
        """Ranks grouped by host; on a single host, ``group_count`` even groups."""
        hosts: dict[str, list[int]] = {}
        for rank, address in enumerate(addresses):
            hosts.setdefault(address.rsplit(":", 1)[0], []).append(rank)
        if len(hosts) > 1:
            return tuple(tuple(ranks) for ranks in hosts.values())
        # An elastic run that lost devices may have fewer than the groups asked for.
        count = min(self.group_count(config), len(addresses))
        return tuple(tuple(g) for g in even_groups(len(addresses), count))

    def check_config(self, config: RunConfig) -> None:
        replicas_divide_the_batch(config)

    def elastic(self, config: RunConfig) -> bool:
        # Replica r of N takes rows [r*B/N, (r+1)*B/N) of the same global batch, for any N.
        return bool(config.options.get("elastic", False))

    def plan(
        self, config: RunConfig, job: TrainingJob, session: ClusterSession, progress: Progress
    ) -> DevicePlan:
        replicas = len(session.addresses)
        algorithm = self.algorithm(config, session.device_type)
        if algorithm == "nccl" and session.device_type != "gpu":
            raise ConfigError(
                "--allreduce",
                "nccl reduces GPU buffers, but this run's devices are CPUs "
                "(ring, hierarchical-copy, reduce-to-one work on both)",
            )
        specs = [
            ReplicaSpec(
                worker=make_worker_spec(session, job, rank, replicas),
                stall_timeout=config.stall_timeout,
                algorithm=algorithm,
                groups=self.groups(config, session.addresses),
                central_storage=self.central_storage,
                bucket_bytes=int(config.bucket_mb * 2**20),
                compression=self.compression(config),
            )
            for rank in range(replicas)
        ]
        # Mirrored: every replica holds the same variables, so rank 0's are the result.
        return DevicePlan.uniform(session, setup_replica, specs, run_resident_steps, [0])
