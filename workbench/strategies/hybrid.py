"""``hybrid``: data parallel x pipeline on a 2-D mesh of ``--devices`` = replicas x
``--stages`` devices. Each replica pipelines its slice of the batch through its stages; each
stage then ring-all-reduces its gradients with the same stage of the other replicas, with
``--compression topk:RATIO`` or ``powersgd:RANK`` if asked (fp16/bf16's loss scaler would need
every stage to skip a step together; the stages decide apart). The device side is the
pipeline's (:mod:`workbench.parallel.pipeline.stage_worker`)."""

from __future__ import annotations

from typing import Any

from workbench.config import ConfigError, RunConfig
from workbench.events import EventLog
from workbench.parallel.collectives.compression import compression_summary, parse_compression
from workbench.strategies.options import COMPRESSION
from workbench.strategies.pipeline import Pipeline


class Hybrid(Pipeline):
    name = "hybrid"
    description = "data parallel x pipeline on a 2-D device mesh"
    options = (*Pipeline.options, COMPRESSION)
    planning = "workbench.planner.strategy_planning:HYBRID"
    wires = ("peer", "ring")  # stage activations; the stage all-reduces' ring

    def summary_fields(
        self, config: RunConfig, log: EventLog, devices: list[str]
    ) -> dict[str, Any]:
        fields = super().summary_fields(config, log, devices)
        if config.compression != "none":
            fields["compression"] = compression_summary(config.compression, log, devices)
        return fields

    def check_config(self, config: RunConfig) -> None:
        if parse_compression(config.compression).half_precision:
            raise ConfigError(
                "--compression",
                f"{config.compression} skips a step when its loss scaler sees an overflow, "
                "and hybrid's stages would decide apart; use none, topk:RATIO or powersgd:RANK",
            )
        if config.devices % config.stages or config.devices == config.stages:
            raise ConfigError(
                "--devices",
                f"hybrid needs a 2-D mesh: --devices {config.devices} must be a multiple "
                f"(>= 2x) of --stages {config.stages}",
            )
        replicas = config.devices // config.stages
        if config.batch_size % (replicas * config.microbatches):
            raise ConfigError(
                "--batch-size",
                f"the global batch {config.batch_size} must divide evenly into "
                f"{replicas} replicas x {config.microbatches} micro-batches",
            )
