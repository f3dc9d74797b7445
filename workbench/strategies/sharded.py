"""``sharded``: ZeRO (DeepSpeed) and PyTorch FSDP on Dask workers.

Data parallel like ``mirrored``, but each of the N replicas keeps only a 1/N shard of what
``--zero-stage`` names: 1 the optimizer state, 2 also the gradients (reduce-scatter instead
of all-reduce), 3 also the parameters (all-gathered before each bucket's forward and backward,
freed after; FSDP's FULL_SHARD, and the default, since memory is why one shards). The shards
are the ring's own chunks of each ``--bucket-mb`` fusion bucket, so the collectives are the
ring all-reduce's two halves. With ``--precision mixed-*`` the shards are float32 masters and
the model computes with 16-bit copies, all-gathered in 16 bits. The device side is
:mod:`workbench.parallel.data_parallel.sharded_replica`.
"""

from __future__ import annotations

import numpy as np

from workbench.config import ConfigError, RunConfig
from workbench.parallel.collectives import plan_buckets
from workbench.parallel.data_parallel.sharded_replica import (
    ShardedReplicaSpec,
    setup_sharded_replica,
)
from workbench.parallel.data_parallel.shards import ShardLayout, join_shards
from workbench.parallel.device_run import DevicePlan, SetupGroup
from workbench.parallel.resident_steps import run_resident_steps
from workbench.parallel.worker_spec import make_worker_spec
from workbench.strategies.cluster_strategy import PlanContext
from workbench.strategies.data_parallel import DataParallel
from workbench.strategies.options import (
    BUCKET_MB,
    ZERO_STAGE,
    ZERO_STAGES,
    ReplicationName,
    ShardedOptions,
)
from workbench.training.job import TrainingJob


class Sharded(DataParallel):
    name = "sharded"
    description = (
        "sync data parallel with ZeRO/FSDP sharding: optimizer state (1), gradients (2), "
        "parameters (3) kept as 1/N shards"
    )
    options = (ZERO_STAGE, BUCKET_MB)
    options_type = ShardedOptions
    planning = "workbench.planner.strategy_planning:SHARDED"

    def algorithm(self, config: RunConfig, device_type: str, nccl_usable: bool = True) -> str:
        # The shards are the ring's chunks: its reduce-scatter and all-gather halves, on
        # GPUs too (docs/guide/distributed-training.md, "Sharded data parallelism (ZeRO, FSDP)").
        return "ring"

    def zero_stage(self, config: RunConfig) -> int:
        return config.options_of(ShardedOptions).zero_stage

    def compression(self, config: RunConfig) -> str:
        return "none"

    def bucket_bytes(self, config: RunConfig) -> int:
        return int(config.options_of(ShardedOptions).bucket_mb * 2**20)

    def replication(self, config: RunConfig) -> ReplicationName:
        return "between-graph"

    def check_config(self, config: RunConfig) -> None:
        super().check_config(config)
        stage = self.zero_stage(config)
        if stage not in ZERO_STAGES:
            raise ConfigError(
                "--zero-stage",
                f"must be 1 (optimizer state sharded), 2 (also gradients) or 3 (also "
                f"parameters), got {stage}",
            )

    def layout(self, config: RunConfig, job: TrainingJob, replicas: int) -> ShardLayout:
        """The buckets the replicas shard, as they plan them."""
        itemsize = np.dtype(config.dtype).itemsize
        shapes = job.model.parameter_shapes()
        return ShardLayout(
            tuple(plan_buckets(shapes, itemsize, self.bucket_bytes(config))), replicas
        )

    def plan(self, config: RunConfig, job: TrainingJob, at: PlanContext) -> DevicePlan:
        session, restore = at.session, at.restore
        replicas = len(session.addresses)
        specs = [
            ShardedReplicaSpec(
                worker=make_worker_spec(session, job, rank, replicas, restore),
                stall_timeout=config.stall_timeout,
                algorithm="ring",
                groups=self.groups(config, session.addresses),
                bucket_bytes=self.bucket_bytes(config),
                zero_stage=self.zero_stage(config),
            )
            for rank in range(replicas)
        ]
        layout = self.layout(config, job, replicas)
        ranks = range(replicas)
        return DevicePlan(
            setups=[SetupGroup(setup_sharded_replica, specs, ranks)],
            step_function=run_resident_steps,
            step_arguments=lambda step, count: [(session.run_id, step, count)] * replicas,
            step_ranks=ranks,
            # Every rank holds a shard of everything: the client joins them.
            snapshot_ranks=ranks,
            merge=lambda snapshots: join_shards(layout, snapshots),
        )

    def summary_fields(self, config: RunConfig, log, devices: list[str]) -> dict:
        return {"zero_stage": self.zero_stage(config), "allreduce": "ring"}
