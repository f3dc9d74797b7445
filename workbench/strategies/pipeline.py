"""``pipeline``: the model's layers in ``--stages`` stages on as many devices, each global batch
in ``--microbatches`` micro-batches, scheduled by ``--schedule gpipe | 1f1b``.

Stages exchange activations forward and gradients backward peer to peer; every stage updates
its own variables once per step with the mean gradient over micro-batches, so the result equals
one-device training. The idle time while a stage waits (the bubble) shows in its events and in
the summary's ``bubble_fraction``. The device side is :mod:`workbench.parallel.pipeline`.
"""

from __future__ import annotations

from typing import Any, ClassVar

from workbench.config import ConfigError, Option, RunConfig, StrategyOptions
from workbench.events import EventLog, bubble_fraction
from workbench.models import Sequential
from workbench.parallel.device_run import DevicePlan
from workbench.parallel.pipeline.stage_worker import StageSpec, setup_stage
from workbench.parallel.pipeline.stages import StageError, chunks_per_device, split_layers
from workbench.parallel.resident_steps import run_resident_steps
from workbench.parallel.worker_spec import make_worker_spec
from workbench.strategies.cluster_strategy import ClusterStrategy, PlanContext
from workbench.strategies.definition import layers_fill
from workbench.strategies.options import (
    MICROBATCHES,
    SCHEDULE,
    STAGES,
    VIRTUAL_STAGES,
    PipelineOptions,
)
from workbench.training.job import TrainingJob


def check_schedule(
    schedule: str, microbatches: int, virtual_stages: int, stages: int, stages_flag: str
) -> None:
    """The schedule's own rules (pipeline, hybrid and the mesh): ``--virtual-stages``
    interleaves only under interleaved-1f1b, which takes micro-batches in groups of the
    ``stages`` (Megatron's rule; ``stages_flag`` names them in the message: ``--stages``, the
    mesh's ``pp=``). Zero-bubble asks nothing more: every stage's backward splits into its
    input- and weight-gradient halves
    (:func:`workbench.parallel.pipeline.stages.split_backward`)."""
    interleaved = schedule == "interleaved-1f1b"
    # The default cannot be told from a value given: only another one is refused.
    if not interleaved and virtual_stages != VIRTUAL_STAGES.default:
        raise ConfigError(
            "--virtual-stages",
            f"applies only with {VIRTUAL_STAGES.applies_with} (the schedule is "
            f"{schedule}, one model chunk per device)",
        )
    if interleaved and microbatches % stages:
        raise ConfigError(
            "--microbatches",
            f"interleaved-1f1b takes micro-batches in groups of the {stages} stages: "
            f"--microbatches {microbatches} must be a multiple of {stages_flag}{stages}",
        )


class Pipeline(ClusterStrategy):
    name = "pipeline"
    description = (
        "layers in stages on devices, micro-batches scheduled by GPipe, 1F1B, interleaved 1F1B "
        "or zero-bubble"
    )
    # Typed as the base's, so that hybrid, a pipeline with one more option, may extend them.
    options: ClassVar[tuple[Option, ...]] = (STAGES, MICROBATCHES, SCHEDULE, VIRTUAL_STAGES)
    options_type: ClassVar[type[StrategyOptions]] = PipelineOptions
    planning = "workbench.planner.strategy_planning:PIPELINE"

    def device_batch_sizes(self, config: RunConfig) -> tuple[int, ...]:
        options = config.options_of(PipelineOptions)
        replicas = max(1, config.devices // options.stages)
        return (max(1, config.batch_size // (replicas * options.microbatches)),)

    def check_config(self, config: RunConfig) -> None:
        options = config.options_of(PipelineOptions)
        if config.devices != options.stages:
            raise ConfigError(
                "--devices",
                f"a pipeline puts one stage on each device: --devices {config.devices} "
                f"must equal --stages {options.stages}",
            )
        if config.batch_size % options.microbatches:
            raise ConfigError(
                "--microbatches",
                f"the global batch {config.batch_size} must divide evenly into "
                f"{options.microbatches} micro-batches",
            )
        check_schedule(
            options.schedule,
            options.microbatches,
            options.virtual_stages,
            options.stages,
            "--stages ",
        )

    def check_model(self, config: RunConfig, model: Sequential) -> None:
        """Refuse, before any cluster work, a model with fewer layers than stages (or than
        model chunks, with virtual stages)."""
        options = config.options_of(PipelineOptions)
        layers_fill(model, options.stages, "--stages")
        chunks = options.stages * chunks_per_device(options.schedule, options.virtual_stages)
        try:
            split_layers(model, chunks)
        except StageError:
            raise ConfigError(
                "--virtual-stages",
                f"--stages {options.stages} x --virtual-stages {options.virtual_stages} = "
                f"{chunks} model chunks need at least as many layers; the model has "
                f"{len(model.layers)}",
            ) from None

    def compression(self, config: RunConfig) -> str:
        """How the stage groups' all-reduces compress (a pipeline has one replica: none)."""
        return "none"

    def plan(self, config: RunConfig, job: TrainingJob, at: PlanContext) -> DevicePlan:
        session, restore = at.session, at.restore
        options = config.options_of(PipelineOptions)
        specs = [
            StageSpec(
                make_worker_spec(session, job, rank, 1, restore),
                config.stall_timeout,
                stages=options.stages,
                microbatches=options.microbatches,
                schedule=options.schedule,
                compression=self.compression(config),
                virtual_stages=chunks_per_device(options.schedule, options.virtual_stages),
            )
            for rank in range(config.devices)
        ]
        # Replica 0's stages hold every variable between them.
        return DevicePlan.uniform(
            session, setup_stage, specs, run_resident_steps, range(options.stages)
        )

    def summary_fields(
        self, config: RunConfig, log: EventLog, devices: list[str]
    ) -> dict[str, Any]:
        return {"bubble_fraction": bubble_fraction(log, devices)}
