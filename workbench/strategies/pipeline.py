"""``pipeline``: the model's layers in ``--stages`` stages on as many devices, each global batch
in ``--microbatches`` micro-batches, scheduled by ``--schedule gpipe | 1f1b``.

Stages exchange activations forward and gradients backward peer to peer; every stage updates
its own variables once per step with the mean gradient over micro-batches, so the result equals
one-device training. The idle time while a stage waits (the bubble) shows in its events and in
the summary's ``bubble_fraction``. The device side is :mod:`workbench.parallel.pipeline`.
"""

from __future__ import annotations

from typing import Any

from workbench.config import ConfigError, RunConfig
from workbench.events import EventLog, bubble_fraction
from workbench.models import Sequential
from workbench.parallel.device_run import DevicePlan
from workbench.parallel.pipeline.stage_worker import StageSpec, setup_stage
from workbench.parallel.resident_steps import run_resident_steps
from workbench.parallel.worker_spec import make_worker_spec
from workbench.strategies.cluster_strategy import ClusterStrategy, PlanContext
from workbench.strategies.definition import layers_fill
from workbench.strategies.options import MICROBATCHES, SCHEDULE, STAGES
from workbench.training.job import TrainingJob


class Pipeline(ClusterStrategy):
    name = "pipeline"
    description = "layers in stages on devices, micro-batches scheduled by GPipe or 1F1B"
    options = (STAGES, MICROBATCHES, SCHEDULE)
    planning = "workbench.planner.strategy_planning:PIPELINE"

    def device_batch_sizes(self, config: RunConfig) -> tuple[int, ...]:
        replicas = max(1, config.devices // config.stages)
        return (max(1, config.batch_size // (replicas * config.microbatches)),)

    def check_config(self, config: RunConfig) -> None:
        if config.devices != config.stages:
            raise ConfigError(
                "--devices",
                f"a pipeline puts one stage on each device: --devices {config.devices} "
                f"must equal --stages {config.stages}",
            )
        if config.batch_size % config.microbatches:
            raise ConfigError(
                "--microbatches",
                f"the global batch {config.batch_size} must divide evenly into "
                f"{config.microbatches} micro-batches",
            )

    def check_model(self, config: RunConfig, model: Sequential) -> None:
        """Refuse, before any cluster work, a model with fewer layers than stages."""
        layers_fill(model, config.stages, "--stages")

    def plan(self, config: RunConfig, job: TrainingJob, at: PlanContext) -> DevicePlan:
        session, restore = at.session, at.restore
        specs = [
            StageSpec(make_worker_spec(session, job, rank, 1, restore), config.stall_timeout)
            for rank in range(config.devices)
        ]
        # Replica 0's stages hold every variable between them.
        return DevicePlan.uniform(
            session, setup_stage, specs, run_resident_steps, range(config.stages)
        )

    def summary_fields(
        self, config: RunConfig, log: EventLog, devices: list[str]
    ) -> dict[str, Any]:
        return {"bubble_fraction": bubble_fraction(log, devices)}
