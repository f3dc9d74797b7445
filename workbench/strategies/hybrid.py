"""``hybrid``: data parallel x pipeline on a 2-D mesh of ``--devices`` = replicas x
``--stages`` devices. Each replica pipelines its slice of the batch through its stages; each
stage then ring-all-reduces its gradients with the same stage of the other replicas, with
``--compression topk:RATIO`` or ``powersgd:RANK`` if asked (fp16/bf16's loss scaler would need
every stage to skip a step together; the stages decide apart). The device side is the
pipeline's (:mod:`workbench.parallel.pipeline.stage_worker`)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from workbench.calibration.run_start import RunCalibration
from workbench.calibration.stage_groups_probe import measure_mesh, neighbours, stage_groups
from workbench.config import ConfigError, RunConfig
from workbench.costs import STAGE_HANDOFF, collective_key
from workbench.events import EventLog
from workbench.parallel.collectives import DEFAULT_BUCKET_BYTES
from workbench.parallel.collectives.compression import compression_summary, parse_compression
from workbench.parallel.pipeline.stages import split_layers
from workbench.runtime.cluster import ClusterSession
from workbench.strategies.cluster_strategy import Known, Progress
from workbench.strategies.options import COMPRESSION, HybridOptions
from workbench.strategies.pipeline import Pipeline, check_schedule
from workbench.training.job import TrainingJob


class Hybrid(Pipeline):
    name = "hybrid"
    description = "data parallel x pipeline on a 2-D device mesh"
    options = (*Pipeline.options, COMPRESSION)
    options_type = HybridOptions
    planning = "workbench.planner.strategy_planning:HYBRID"
    wires = ("peer", "ring")  # stage activations; the stage all-reduces' ring

    def _calibrated(
        self, job: TrainingJob, session: ClusterSession, progress: Progress, so_far: Known
    ) -> RunCalibration:
        """Besides nodes and links, the stage all-reduces as the mesh runs them: every stage
        group at once, on more devices than a CPU host may have cores (then cached), for the
        planner's prediction."""
        so_far = super()._calibrated(job, session, progress, so_far)
        config = job.config
        stages = config.options_of(HybridOptions).stages
        names = session.device_names
        options = config.options_of(HybridOptions)
        keys = [
            collective_key("ring", [names[rank] for rank in group])
            for group in stage_groups(len(names), stages)
        ] + [
            collective_key(STAGE_HANDOFF, [names[rank] for rank in pair])
            for first, second in neighbours(len(names), stages)
            for pair in ((first, second), (second, first))
        ]
        model = job.model
        itemsize = np.dtype(config.dtype).itemsize
        gradient_bytes = sum(math.prod(s) for s in model.parameter_shapes().values()) * itemsize
        micro = config.batch_size // (len(names) // stages) // options.microbatches
        boundaries = split_layers(model, stages)[:-1]
        # A one-stage mesh (replicas only) hands nothing on.
        handoff_bytes = itemsize * max(
            (micro * math.prod(model.shapes[b.stop]) for b in boundaries), default=0
        )

        def measure(missing: list[str]) -> dict:
            reduce_bytes = min(DEFAULT_BUCKET_BYTES, gradient_bytes)
            fits = measure_mesh(
                session, stages, reduce_bytes, handoff_bytes, stall_timeout=config.stall_timeout
            )
            return {"collectives": fits}

        return self._measure_more(job, session, progress, keys, measure, so_far)

    def summary_fields(
        self, config: RunConfig, log: EventLog, devices: list[str]
    ) -> dict[str, Any]:
        fields = super().summary_fields(config, log, devices)
        compression = config.options_of(HybridOptions).compression
        if compression != "none":
            fields["compression"] = compression_summary(compression, log, devices)
        return fields

    def compression(self, config: RunConfig) -> str:
        return config.options_of(HybridOptions).compression

    def check_config(self, config: RunConfig) -> None:
        options = config.options_of(HybridOptions)
        if parse_compression(options.compression).half_precision:
            raise ConfigError(
                "--compression",
                f"{options.compression} skips a step when its loss scaler sees an overflow, "
                "and hybrid's stages would decide apart; use none, topk:RATIO or powersgd:RANK",
            )
        if config.devices % options.stages or config.devices == options.stages:
            raise ConfigError(
                "--devices",
                f"hybrid needs a 2-D mesh: --devices {config.devices} must be a multiple "
                f"(>= 2x) of --stages {options.stages}",
            )
        replicas = config.devices // options.stages
        if config.batch_size % (replicas * options.microbatches):
            raise ConfigError(
                "--batch-size",
                f"the global batch {config.batch_size} must divide evenly into "
                f"{replicas} replicas x {options.microbatches} micro-batches",
            )
        check_schedule(
            options.schedule,
            options.microbatches,
            options.virtual_stages,
            options.stages,
            "--stages ",
        )
