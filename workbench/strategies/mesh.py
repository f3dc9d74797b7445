"""``mesh``: data x tensor x pipeline parallelism on a ``--mesh dp=A,tp=B,pp=C`` of
``--devices`` = A x B x C devices (Megatron-LM's 3-D layout).

The model's layers are cut into ``pp`` stages as a pipeline's are; each stage's layers are
split over ``tp`` tensor-parallel ranks (Megatron's column then row pairs,
:mod:`workbench.passes.tensor_split`), whose forward and backward all-reduces meet inside the
tensor group; and ``dp`` replicas of that pipeline each take an equal share of the batch, every
device averaging its gradients with the devices that hold the same shard (its data group)
before one update per step. ``hybrid`` is the mesh with ``tp=1``. The device side is the
pipeline's (:mod:`workbench.parallel.pipeline.stage_worker`), run at mesh coordinates
(docs/guide/distributed-training.md, "The device mesh").
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from workbench.calibration.run_start import RunCalibration
from workbench.config import ConfigError, RunConfig
from workbench.events import EventLog, bubble_fraction
from workbench.models import Sequential
from workbench.parallel.device_run import DevicePlan
from workbench.parallel.mesh import MeshError, MeshShape, parse_mesh
from workbench.parallel.pipeline.mesh_stage import join_tensor_shards, stage_plans
from workbench.parallel.pipeline.stage_worker import StageSpec, setup_stage
from workbench.parallel.pipeline.stages import StageError, chunks_per_device, split_layers
from workbench.parallel.resident_steps import run_resident_steps
from workbench.parallel.worker_spec import make_worker_spec
from workbench.runtime.cluster import ClusterSession
from workbench.strategies.cluster_strategy import ClusterStrategy, Known, PlanContext, Progress
from workbench.strategies.mesh_exchanges import mesh_exchanges
from workbench.strategies.options import (
    MESH,
    MICROBATCHES,
    SCHEDULE,
    VIRTUAL_STAGES,
    MeshOptions,
)
from workbench.strategies.pipeline import check_schedule
from workbench.training.job import TrainingJob


def mesh_of(config: RunConfig) -> MeshShape:
    """The run's mesh, or a :class:`ConfigError` naming ``--mesh`` with what is allowed (the
    flag parser canonicalises the value; the Python API and the notebook form hand it over as
    written)."""
    text = config.options_of(MeshOptions).mesh
    try:
        return parse_mesh(text)
    except MeshError as error:
        raise ConfigError("--mesh", f"{text!r}: {error}") from None


def chunks_of(config: RunConfig) -> int:
    """Model chunks per device: ``--virtual-stages`` with interleaved 1F1B, else one."""
    options = config.options_of(MeshOptions)
    return chunks_per_device(options.schedule, options.virtual_stages)


class Mesh(ClusterStrategy):
    name = "mesh"
    description = "data x tensor x pipeline parallel on a device mesh (--mesh dp=A,tp=B,pp=C)"
    options = (MESH, MICROBATCHES, SCHEDULE, VIRTUAL_STAGES)
    options_type = MeshOptions
    planning = "workbench.planner.strategy_planning:MESH"
    wires = ("peer", "ring")  # stage activations; the tensor and data groups' rings

    def _calibrated(
        self, job: TrainingJob, session: ClusterSession, progress: Progress, so_far: Known
    ) -> RunCalibration:
        """Besides nodes and links, the mesh's exchanges as its devices run them (every data
        group's all-reduces at once, every tensor group's between computes, the hand-offs
        between busy stages), on more devices than a CPU host may have cores (then cached),
        for the planner's prediction."""
        so_far = super()._calibrated(job, session, progress, so_far)
        options = job.config.options_of(MeshOptions)
        keys, measure = mesh_exchanges(
            job, session, mesh_of(job.config), options.microbatches, chunks_of(job.config)
        )
        return self._measure_more(job, session, progress, keys, measure, so_far)

    def device_batch_sizes(self, config: RunConfig) -> tuple[int, ...]:
        mesh, options = mesh_of(config), config.options_of(MeshOptions)
        return (max(1, config.batch_size // (mesh.dp * options.microbatches)),)

    def check_config(self, config: RunConfig) -> None:
        mesh, options = mesh_of(config), config.options_of(MeshOptions)
        if mesh.devices != config.devices:
            raise ConfigError(
                "--mesh",
                f"{mesh} has {mesh.dp} x {mesh.tp} x {mesh.pp} = {mesh.devices} devices; "
                f"--devices is {config.devices} (the product must equal --devices)",
            )
        if config.batch_size % (mesh.dp * options.microbatches):
            raise ConfigError(
                "--batch-size",
                f"the global batch {config.batch_size} must divide evenly into "
                f"{mesh.dp} replicas (--mesh dp) x {options.microbatches} micro-batches "
                "(--microbatches)",
            )
        check_schedule(
            options.schedule, options.microbatches, options.virtual_stages, mesh.pp, "pp="
        )

    def check_model(self, config: RunConfig, model: Sequential) -> None:
        """Refuse, before any cluster work, a model with fewer layers than the mesh's model
        chunks, or whose stages ``tp`` cannot split."""
        mesh, chunks = mesh_of(config), chunks_of(config)
        try:
            split_layers(model, mesh.pp * chunks)
        except StageError as error:
            virtual = f" x {chunks} virtual stages (--virtual-stages)" if chunks > 1 else ""
            raise ConfigError(
                "--mesh",
                f"pp={mesh.pp} pipeline stages{virtual} need at least {error.parts} layers; "
                f"the model has {error.layers}",
            ) from None
        if mesh.tp > 1:
            stage_plans(model, mesh.tp, mesh.pp * chunks, flag="--mesh")

    def plan(self, config: RunConfig, job: TrainingJob, at: PlanContext) -> DevicePlan:
        session, restore = at.session, at.restore
        mesh, options = mesh_of(config), config.options_of(MeshOptions)
        specs = [
            StageSpec(
                make_worker_spec(session, job, rank, mesh.dp, restore),
                config.stall_timeout,
                stages=mesh.pp,
                microbatches=options.microbatches,
                schedule=options.schedule,
                mesh=mesh,
                virtual_stages=chunks_of(config),
            )
            for rank in range(config.devices)
        ]
        # Replica 0's devices (ranks 0 .. tp*pp-1) hold every shard of every variable.
        plan = DevicePlan.uniform(
            session, setup_stage, specs, run_resident_steps, range(mesh.tp * mesh.pp)
        )
        if mesh.tp == 1:
            return plan
        split_plan = stage_plans(job.model, mesh.tp, mesh.pp * chunks_of(config))
        return replace(
            plan, merge=lambda snapshots: join_tensor_shards(snapshots, mesh, split_plan)
        )

    def summary_fields(
        self, config: RunConfig, log: EventLog, devices: list[str]
    ) -> dict[str, Any]:
        # A pipeline's idle share (GPipe's definition: the tensor group's all-reduces count as
        # time not computing); a mesh without stages has no pipeline to idle in.
        pipelined = mesh_of(config).pp > 1
        return {"bubble_fraction": bubble_fraction(log, devices) if pipelined else None}
