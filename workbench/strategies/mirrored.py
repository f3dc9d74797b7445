"""``mirrored``: TF's ``MirroredStrategy`` on Dask workers.

Variables are mirrored on every device; gradients are all-reduced with ``--allreduce``:
``nccl`` (NCCL on the GPUs' device buffers; the default on GPUs, as in TF), ``ring`` (the
workbench's own, the default on CPUs), ``hierarchical-copy`` (reduce in two groups, ring
between the group leaders, broadcast back) or ``reduce-to-one`` (one device sums and
broadcasts).
"""

from __future__ import annotations

from workbench.config import ConfigError, RunConfig
from workbench.parallel.collectives.compression import compression_summary, parse_compression
from workbench.parallel.collectives.nccl import NcclAllReduce
from workbench.strategies.data_parallel import DataParallel
from workbench.strategies.options import (
    ALLREDUCE,
    BUCKET_MB,
    COMPRESSION,
    ELASTIC,
    REPLICATION,
    MirroredOptions,
    ReplicationName,
)


class Mirrored(DataParallel):
    name = "mirrored"
    description = "sync data parallel on one host: variables mirrored, gradients all-reduced"
    options = (ALLREDUCE, BUCKET_MB, COMPRESSION, ELASTIC, REPLICATION)
    options_type = MirroredOptions
    planning = "workbench.planner.strategy_planning:MIRRORED"

    def algorithm(self, config: RunConfig, device_type: str, nccl_usable: bool = True) -> str:
        options = config.options_of(MirroredOptions)
        if options.allreduce != "auto":
            return options.allreduce
        # NCCL reduces dense buffers in the type it moves, so compression keeps the ring; so
        # do GPUs where NCCL did not load or that several devices share.
        gpu = device_type == "gpu" and nccl_usable and options.compression == "none"
        return "nccl" if gpu else "ring"

    def replication(self, config: RunConfig) -> ReplicationName:
        return config.options_of(MirroredOptions).replication

    def elastic(self, config: RunConfig) -> bool:
        return config.options_of(MirroredOptions).elastic

    def check_config(self, config: RunConfig) -> None:
        super().check_config(config)
        options = config.options_of(MirroredOptions)
        if options.allreduce == "nccl" and options.compression != "none":
            raise ConfigError("--compression", nccl_refusal(options.compression))
        if options.allreduce == "nccl" and config.share_gpu:
            raise ConfigError(
                "--allreduce",
                "nccl refuses two ranks on one GPU, which --share-gpu allows; choose ring, "
                "hierarchical-copy or reduce-to-one (or auto)",
            )

    def summary_fields(self, config: RunConfig, log, devices: list[str]) -> dict:
        used_nccl = any(event.path == NcclAllReduce.path for event in log.phases())
        return {
            "allreduce": self.algorithm(config, "gpu" if used_nccl else "cpu"),
            "compression": compression_summary(self.compression(config), log, devices),
        }


def nccl_refusal(compression: str) -> str:
    """Why ``--allreduce nccl`` cannot carry ``compression`` (a canonical value)."""
    others = "ring, hierarchical-copy or reduce-to-one"
    method = parse_compression(compression).method
    if method == "topk":
        reason = "exchanges (index, value) pairs, an all-gather NCCL's all-reduce does not do"
    elif method == "powersgd":
        reason = (
            "reduces its P and Q factors between steps of its own, with the workbench's collectives"
        )
    else:  # fp16, bf16
        reason = "needs an all-reduce that sums in full precision; NCCL sums in the type it moves"
    return f"{compression} {reason}; choose --allreduce {others}"
