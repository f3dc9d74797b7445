"""``hybrid``: data parallel x pipeline on a 2-D mesh of ``--devices`` = replicas x
``--stages`` devices. Each replica pipelines its slice of the batch through its stages; each
stage then ring-all-reduces its gradients with the same stage of the other replicas, with
``--compression topk:RATIO`` or ``powersgd:RANK`` if asked (fp16/bf16's loss scaler would need
every stage to skip a step together; the stages decide apart). The device side is the
pipeline's (:mod:`workbench.parallel.pipeline.stage_worker`)."""

from __future__ import annotations

from typing import Any

from workbench.calibration.run_start import RunCalibration
from workbench.config import ConfigError, RunConfig
from workbench.events import EventLog
from workbench.parallel.collectives.compression import compression_summary, parse_compression
from workbench.parallel.mesh import MeshShape
from workbench.parallel.pipeline.stages import chunks_per_device
from workbench.runtime.cluster import ClusterSession
from workbench.strategies.cluster_strategy import Known, Progress
from workbench.strategies.mesh_exchanges import mesh_exchanges
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
        """Besides nodes and links, the stage all-reduces and the hand-offs as the mesh runs
        them: every stage group at once, on more devices than a CPU host may have cores (then
        cached), for the planner's prediction."""
        so_far = super()._calibrated(job, session, progress, so_far)
        options = job.config.options_of(HybridOptions)
        replicas = len(session.device_names) // options.stages
        keys, measure = mesh_exchanges(
            job,
            session,
            MeshShape(dp=replicas, pp=options.stages),
            options.microbatches,
            chunks_per_device(options.schedule, options.virtual_stages),
        )
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
