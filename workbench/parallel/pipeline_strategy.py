"""``pipeline``: the model's layers in ``--stages`` stages on as many devices, each global batch
in ``--microbatches`` micro-batches, scheduled by ``--schedule gpipe | 1f1b``.

Stages exchange activations forward and gradients backward peer to peer; every stage updates
its own variables once per step with the mean gradient over micro-batches, so the result equals
one-device training. The idle time while a stage waits (the bubble) shows in its events.
"""

from __future__ import annotations

import contextlib

from workbench.events import EventLog
from workbench.parallel.data_parallel import worker_spec
from workbench.parallel.dispatch import submit_each, wait_all
from workbench.parallel.pipeline.stage_worker import (
    StageSpec,
    run_stage_steps,
    setup_stage,
    stage_snapshot,
)
from workbench.parallel.replica import drop_replica
from workbench.parallel.step_loop import drive_steps
from workbench.runtime import device_name
from workbench.runtime.cluster import start_cluster
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
        devices, stages = config.devices, config.stages
        with start_cluster(devices, job.device_type, config.cluster) as session:
            if session.dashboard_link:
                progress(f"[{self.name}] Dask dashboard: {session.dashboard_link}")
            specs = [
                (StageSpec(worker_spec(session, job, rank, 1), config.stall_timeout),)
                for rank in range(devices)
            ]
            ready = submit_each(session, self.name, "setup", None, setup_stage, specs)
            wait_all(session, ready, "setup", None, config.stall_timeout + 120)
            first_replica = range(stages)  # replica 0's stages hold every variable
            try:
                drive_steps(
                    session,
                    job,
                    log,
                    progress,
                    self.name,
                    run_stage_steps,
                    lambda step, count: [(session.run_id, step, count)] * devices,
                )
                snapshot = submit_each(
                    session,
                    self.name,
                    "snapshot",
                    None,
                    stage_snapshot,
                    [(session.run_id,)] * stages,
                    ranks=first_replica,
                )
                snapshots = wait_all(
                    session,
                    snapshot,
                    "gathering variables",
                    job.total_steps,
                    config.stall_timeout,
                    ranks=first_replica,
                )
            finally:
                cleanup = submit_each(
                    session, self.name, "cleanup", None, drop_replica, [(session.run_id,)] * devices
                )
                with contextlib.suppress(Exception):
                    wait_all(session, cleanup, "cleanup", None, deadline=10)
        host = TrainingSession(
            job.model, job.optimizer, job.sampler.batch_size, config.dtype, config.seed
        )
        host.load_state(
            {n: v for snap in snapshots for n, v in snap["parameters"].items()},
            {n: v for snap in snapshots for n, v in snap["optimizer_state"].items()},
        )
        return host


class HybridStrategy(PipelineStrategy):
    """``hybrid``: data parallel x pipeline on a 2-D mesh of ``--devices`` = replicas x
    ``--stages`` devices. Each replica pipelines its slice of the batch through its stages;
    each stage then ring-all-reduces its gradients with the same stage of the other replicas."""

    name = "hybrid"
