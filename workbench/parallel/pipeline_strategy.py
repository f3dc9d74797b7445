"""``pipeline``: the model's layers in ``--stages`` stages on as many devices, each global batch
in ``--microbatches`` micro-batches, scheduled by ``--schedule gpipe | 1f1b``.

Stages exchange activations forward and gradients backward peer to peer; every stage updates
its own variables once per step with the mean gradient over micro-batches, so the result equals
one-device training. The idle time while a stage waits (the bubble) shows in its events.
"""

from __future__ import annotations

from workbench.events import EventLog
from workbench.parallel.data_parallel import worker_spec
from workbench.parallel.device_run import DevicePlan, SetupGroup, run_on_devices
from workbench.parallel.pipeline.stage_worker import (
    StageSpec,
    run_stage_steps,
    setup_stage,
)
from workbench.runtime import device_name
from workbench.training.job import Progress, TrainingJob
from workbench.training.session import TrainingSession


class PipelineStrategy:
    name = "pipeline"

    def __init__(self, config) -> None:
        self.config = config

    def check_model(self, model) -> None:
        """Refuse, before any cluster work, a model with fewer layers than stages."""
        from workbench.config import ConfigError
        from workbench.parallel.pipeline.stages import StageError, split_layers

        try:
            split_layers(model, self.config.stages)
        except StageError as error:
            raise ConfigError("--stages", str(error).split(": ", 1)[1]) from None

    def device_names(self, device_type: str) -> list[str]:
        return [device_name(device_type, task=rank) for rank in range(self.config.devices)]

    def train(self, job: TrainingJob, log: EventLog, progress: Progress) -> TrainingSession:
        config = self.config

        def plan(session) -> DevicePlan:
            ranks = range(config.devices)
            specs = [
                StageSpec(worker_spec(session, job, rank, 1), config.stall_timeout)
                for rank in ranks
            ]
            return DevicePlan(
                setups=[SetupGroup(setup_stage, specs, ranks)],
                step_function=run_stage_steps,
                step_arguments=lambda step, count: [(session.run_id, step, count)] * len(ranks),
                step_ranks=ranks,
                snapshot_ranks=range(config.stages),  # replica 0's stages hold every variable
            )

        return run_on_devices(self.name, job, log, progress, config.devices, plan)


class HybridStrategy(PipelineStrategy):
    """``hybrid``: data parallel x pipeline on a 2-D mesh of ``--devices`` = replicas x
    ``--stages`` devices. Each replica pipelines its slice of the batch through its stages;
    each stage then ring-all-reduces its gradients with the same stage of the other replicas."""

    name = "hybrid"
