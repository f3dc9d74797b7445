"""Synchronous data parallelism, client side: one replica per device, lock-step steps.

Every replica computes gradients on its slice of the same global batch, the replicas all-reduce
them (the algorithm is the subclass's choice), and each applies the identical averaged update,
so the variables stay mirrored and equal the one-device result
(docs/architecture/determinism.md, "Same data, same result"). A step is as slow as the slowest
replica: the price of synchronous updates. The device side is
:mod:`workbench.parallel.data_parallel.replica`.
"""

from __future__ import annotations

import math

import numpy as np

from workbench.calibration.collectives_probe import CENTRAL_KINDS, measure_collective
from workbench.calibration.probe import LATENCY_SIZES, TRANSFER_SIZES
from workbench.calibration.run_start import RunCalibration
from workbench.config import ConfigError, RunConfig
from workbench.costs import collective_key
from workbench.parallel.collectives import even_groups
from workbench.parallel.data_parallel.in_graph import build_in_graph_replication
from workbench.parallel.data_parallel.replica import ReplicaSpec, setup_replica
from workbench.parallel.device_run import DevicePlan
from workbench.parallel.model_parallel.device import DeviceSpec, setup_device
from workbench.parallel.model_parallel.graph import ModelParallelPlan
from workbench.parallel.resident_steps import run_resident_steps
from workbench.parallel.worker_spec import make_worker_spec
from workbench.runtime.cluster import ClusterSession
from workbench.strategies.cluster_strategy import ClusterStrategy, Known, PlanContext
from workbench.strategies.definition import replicas_divide_the_batch
from workbench.strategies.options import DataParallelOptions, ReplicationName
from workbench.training.job import Progress, RestorePoint, TrainingJob


class DataParallel(ClusterStrategy):
    """The family base: mirrored, central storage and multi-worker mirrored differ only in
    how the replicas combine their gradients."""

    central_storage = False  # variables kept and updated on rank 0 only

    def algorithm(self, config: RunConfig, device_type: str, nccl_usable: bool = True) -> str:
        """The all-reduce algorithm (``--allreduce`` values) on ``device_type`` devices
        (``nccl_usable``: whether NCCL can reduce between them)."""
        return "ring"

    def group_count(self, config: RunConfig) -> int:
        """Groups for hierarchical all-reduce when the devices share one host."""
        return 2

    def _calibrated(
        self, job: TrainingJob, session: ClusterSession, progress: Progress, so_far: Known
    ) -> RunCalibration:
        """Besides nodes and links, the run's own collectives as its replicas run them (the
        all-reduce; central storage's reduce and broadcast), once per cluster, kind and
        groups (then cached), for the planner's prediction."""
        so_far = super()._calibrated(job, session, progress, so_far)
        config = job.config
        if not self.times_its_collectives(config, session.device_type, session.nccl_usable):
            return so_far
        groups = self.groups(config, session.addresses)
        names = session.device_names
        named_groups = [[names[rank] for rank in group] for group in groups]
        kinds = (
            CENTRAL_KINDS
            if self.central_storage
            else (self.algorithm(config, session.device_type, session.nccl_usable),)
        )
        gradient_bytes = (
            sum(math.prod(shape) for shape in job.model.parameter_shapes().values())
            * np.dtype(config.dtype).itemsize
        )
        largest = min(self.bucket_bytes(config), gradient_bytes)
        keys = {collective_key(kind, names, named_groups): kind for kind in kinds}

        def measure(missing: list[str]) -> dict:
            fits = {}
            for key in missing:
                fits.update(
                    measure_collective(
                        session, keys[key], groups, largest, stall_timeout=config.stall_timeout
                    )
                )
            return {"collectives": fits}

        return self._measure_more(job, session, progress, list(keys), measure, so_far)

    def compression(self, config: RunConfig) -> str:
        """The ``--compression`` value (validated, canonical)."""
        return config.options_of(DataParallelOptions).compression

    def bucket_bytes(self, config: RunConfig) -> int:
        """The gradient fusion buckets' size (``--bucket-mb``) in bytes."""
        return int(config.options_of(DataParallelOptions).bucket_mb * 2**20)

    def replication(self, config: RunConfig) -> ReplicationName:
        """``--replication`` for the strategies that take it; the others build a replica
        graph on each worker."""
        return "between-graph"

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

    # The run's own collectives are timed as its replicas run them (``_calibrated``), which
    # ring shifts would only approximate; the peer links carry the collectives' meeting.
    wires = ("peer",)

    def link_sizes(self, config: RunConfig, device_type: str) -> tuple[int, ...]:
        if self.times_its_collectives(config, device_type):
            return LATENCY_SIZES
        return TRANSFER_SIZES  # in-graph towers' Send/Recv, NCCL: the links as they are

    def times_its_collectives(
        self, config: RunConfig, device_type: str, nccl_usable: bool = True
    ) -> bool:
        """Whether calibration times this run's collectives, on ``device_type`` devices, as
        its replicas run them (not NCCL's, not in-graph towers')."""
        between_graph = self.replication(config) == "between-graph"
        return between_graph and self.algorithm(config, device_type, nccl_usable) != "nccl"

    def device_batch_sizes(self, config: RunConfig) -> tuple[int, ...]:
        return (config.batch_size // config.devices,)

    def check_config(self, config: RunConfig) -> None:
        replicas_divide_the_batch(config)
        if self.replication(config) == "in-graph":
            # The one graph's all-reduce nodes run the ring; the rest is between-graph's (an
            # --allreduce other than auto or ring is refused: auto is the ring on CPUs).
            refused = {
                "--allreduce": self.algorithm(config, "cpu") != "ring",
                "--compression": self.compression(config) != "none",
                "--elastic": self.elastic(config),
            }
            for flag, given in refused.items():
                if given:
                    raise ConfigError(
                        flag,
                        "is for between-graph replication; with --replication in-graph the one "
                        "client graph all-reduces with the ring, uncompressed, on a fixed set "
                        "of devices",
                    )

    def elastic(self, config: RunConfig) -> bool:
        # Replica r of N takes rows [r*B/N, (r+1)*B/N) of the same global batch, for any N,
        # so the family may go on with fewer; the strategies taking --elastic say whether to.
        return False

    def plan(self, config: RunConfig, job: TrainingJob, at: PlanContext) -> DevicePlan:
        session, restore = at.session, at.restore
        replicas = len(session.addresses)
        algorithm = self.algorithm(config, session.device_type, session.nccl_usable)
        if algorithm == "nccl" and session.device_type != "gpu":
            raise ConfigError(
                "--allreduce",
                "nccl reduces GPU buffers, but this run's devices are CPUs "
                "(ring, hierarchical-copy, reduce-to-one work on both)",
            )
        if algorithm == "nccl" and session.nccl_obstacle is not None:
            raise ConfigError(
                "--allreduce",
                f"nccl cannot reduce between this run's GPUs: {session.nccl_obstacle}; "
                "choose ring, hierarchical-copy or reduce-to-one (auto takes ring here)",
            )
        if config.precision == "mixed-bf16" and session.bfloat16_obstacle is not None:
            raise ConfigError(  # a joined cluster's GPUs: known once they report
                "--precision",
                f"mixed-bf16 needs bfloat16 on every GPU {session.bfloat16_obstacle}; "
                "use --precision mixed-fp16",
            )
        if self.replication(config) == "in-graph":
            return self.in_graph_plan(config, job, session, restore)
        specs = [
            ReplicaSpec(
                worker=make_worker_spec(session, job, rank, replicas, restore),
                stall_timeout=config.stall_timeout,
                algorithm=algorithm,
                groups=self.groups(config, session.addresses),
                central_storage=self.central_storage,
                bucket_bytes=self.bucket_bytes(config),
                compression=self.compression(config),
            )
            for rank in range(replicas)
        ]
        # Mirrored: every replica holds the same variables, so rank 0's are the result.
        return DevicePlan.uniform(session, setup_replica, specs, run_resident_steps, [0])

    def graph_plan(self, config: RunConfig, model, optimizer) -> ModelParallelPlan | None:
        if self.replication(config) != "in-graph":
            return None  # between-graph: each worker builds its own replica graph
        names = self.planned_device_names(config)
        return self.in_graph_graph(config, model, optimizer, names)

    def in_graph_graph(self, config: RunConfig, model, optimizer, devices) -> ModelParallelPlan:
        """The one client graph of in-graph replication, placed and partitioned."""
        return build_in_graph_replication(
            model,
            optimizer,
            config.batch_size,
            config.dtype,
            list(devices),
            central_storage=self.central_storage,
            bucket_bytes=self.bucket_bytes(config),
            accumulate=config.accumulate,
            recompute=config.recompute,
        )

    def in_graph_plan(
        self, config: RunConfig, job: TrainingJob, session: ClusterSession, restore: RestorePoint
    ) -> DevicePlan:
        """Every device runs its partition of the one graph each step."""
        graph = self.in_graph_graph(config, job.model, job.optimizer, session.device_names)
        replicas = len(session.addresses)
        specs = [
            DeviceSpec(
                make_worker_spec(session, job, rank, replicas, restore),
                graph.partitioned.partitions[session.device_names[rank]],
                config.stall_timeout,
                towers=replicas * config.accumulate,  # a tower per micro-step (--accumulate)
            )
            for rank in range(replicas)
        ]
        # Device 0 holds the variables (central storage) or a mirrored copy of them.
        return DevicePlan.uniform(session, setup_device, specs, run_resident_steps, [0])
