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
from workbench.parallel.resident_steps import run_resident_steps
from workbench.parallel.worker_spec import make_worker_spec
from workbench.strategies.cluster_strategy import ClusterStrategy, PlanContext
from workbench.strategies.definition import layers_fill
from workbench.strategies.options import MICROBATCHES, SCHEDULE, STAGES, PipelineOptions
from workbench.training.job import TrainingJob


class Pipeline(ClusterStrategy):
    name = "pipeline"
    description = "layers in stages on devices, micro-batches scheduled by GPipe or 1F1B"
    # Typed as the base's, so that hybrid, a pipeline with one more option, may extend them.
    options: ClassVar[tuple[Option, ...]] = (STAGES, MICROBATCHES, SCHEDULE)
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

    def check_model(self, config: RunConfig, model: Sequential) -> None:
        """Refuse, before any cluster work, a model with fewer layers than stages."""
        layers_fill(model, config.options_of(PipelineOptions).stages, "--stages")

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
