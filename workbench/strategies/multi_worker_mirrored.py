"""``multi-worker-mirrored``: TF's ``MultiWorkerMirroredStrategy``: mirrored variables across
several hosts, with a hierarchical all-reduce: reduce inside each host (fast local links), ring
across the hosts' leaders (the slow network), broadcast back inside each host.

Hosts are groups of workers: the real hosts of the cluster when it spans several, otherwise
``--hosts`` simulated hosts of consecutive workers on this machine.
"""

from __future__ import annotations

from workbench.config import ConfigError, RunConfig
from workbench.parallel.collectives.compression import compression_summary
from workbench.strategies.data_parallel import DataParallel
from workbench.strategies.definition import replicas_divide_the_batch
from workbench.strategies.options import (
    BUCKET_MB,
    COMPRESSION,
    ELASTIC,
    HOSTS,
    MultiWorkerMirroredOptions,
)


class MultiWorkerMirrored(DataParallel):
    name = "multi-worker-mirrored"
    description = "mirrored across hosts: reduce in each host, ring across hosts"
    options = (HOSTS, BUCKET_MB, COMPRESSION, ELASTIC)
    options_type = MultiWorkerMirroredOptions
    planning = "workbench.planner.strategy_planning:MULTI_WORKER_MIRRORED"

    def check_config(self, config: RunConfig) -> None:
        replicas_divide_the_batch(config)
        hosts = config.options_of(MultiWorkerMirroredOptions).hosts
        if hosts > config.devices:
            raise ConfigError(
                "--hosts",
                f"{hosts} hosts need at least as many devices, got {config.devices}",
            )

    def algorithm(self, config: RunConfig, device_type: str, nccl_usable: bool = True) -> str:
        return "hierarchical-copy"

    def group_count(self, config: RunConfig) -> int:
        return config.options_of(MultiWorkerMirroredOptions).hosts

    def elastic(self, config: RunConfig) -> bool:
        return config.options_of(MultiWorkerMirroredOptions).elastic

    def summary_fields(self, config: RunConfig, log, devices: list[str]) -> dict:
        return {"compression": compression_summary(self.compression(config), log, devices)}
