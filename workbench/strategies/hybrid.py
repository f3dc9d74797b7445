"""``hybrid``: data parallel x pipeline on a 2-D mesh of ``--devices`` = replicas x
``--stages`` devices. Each replica pipelines its slice of the batch through its stages; each
stage then ring-all-reduces its gradients with the same stage of the other replicas. The
device side is the pipeline's (:mod:`workbench.parallel.pipeline.stage_worker`)."""

from __future__ import annotations

from workbench.config import ConfigError, RunConfig
from workbench.strategies.pipeline import Pipeline


class Hybrid(Pipeline):
    name = "hybrid"
    description = "data parallel x pipeline on a 2-D device mesh"
    options = Pipeline.options

    def check_config(self, config: RunConfig) -> None:
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
