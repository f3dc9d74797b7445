"""``tensor-parallel``: every layer pair, attention and embedding split over ``--tp`` ranks,
one per device (Megatron-LM's intra-layer model parallelism): each device computes its shard
of every split layer on the whole batch, and the ranks meet in one all-reduce forward and one
backward per pair (docs/guide/distributed-training.md, "Tensor parallelism").

The client splits the training step into the ranks' programs
(:mod:`workbench.parallel.tensor_parallel.graph`), places and partitions their joined graph
as the model-parallel strategy does, and each device runs its rank's partition
(:mod:`workbench.parallel.model_parallel.device`), holding its shards of the split variables
and a copy of the rest. The variables are gathered and checkpointed whole: a one-device
checkpoint resumes here and back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from workbench.calibration.run_start import cached_local_calibration
from workbench.config import ConfigError, RunConfig
from workbench.costs import CalibratedCostModel, CostModel, StaticCostModel
from workbench.models import Sequential
from workbench.parallel.device_run import DevicePlan
from workbench.parallel.model_parallel.device import DeviceSpec, setup_device
from workbench.parallel.model_parallel.graph import ModelParallelPlan
from workbench.parallel.resident_steps import run_resident_steps
from workbench.parallel.tensor_parallel.graph import build_tensor_parallel_graph, forward_graph
from workbench.parallel.tensor_parallel.plan import tensor_plan
from workbench.parallel.tensor_parallel.shards import join_state, rank_state
from workbench.parallel.worker_spec import make_worker_spec
from workbench.passes.tensor_split import SplitError, split_for_rank
from workbench.strategies.cluster_strategy import ClusterStrategy, PlanContext
from workbench.strategies.options import TP, TensorParallelOptions
from workbench.training.job import TrainingJob


class TensorParallel(ClusterStrategy):
    name = "tensor-parallel"
    description = "each layer pair, attention and embedding split over --tp devices (Megatron)"
    options = (TP,)
    options_type = TensorParallelOptions
    planning = "workbench.planner.strategy_planning:TENSOR_PARALLEL"

    def tp(self, config: RunConfig) -> int:
        return config.options_of(TensorParallelOptions).tp

    def check_config(self, config: RunConfig) -> None:
        if config.devices != self.tp(config):
            raise ConfigError(
                "--devices",
                f"tensor-parallel runs one rank per device: --devices {config.devices} must "
                f"equal --tp {self.tp(config)}",
            )

    def check_model(self, config: RunConfig, model: Sequential) -> None:
        """The split each rank would run, tried on rank 0 before anything starts."""
        tp = self.tp(config)
        plan = tensor_plan(model, tp)
        try:
            split_for_rank(forward_graph(model, config.batch_size, config.dtype), plan, 0, tp)
        except SplitError as error:
            raise ConfigError(
                "--tp", f"the model does not split over {tp} ranks: {error}"
            ) from None

    def graph_plan(self, config: RunConfig, model: Sequential, optimizer: Any) -> ModelParallelPlan:
        """The plan a run would use, with the costs of the local cluster it would start (the
        run store's cached calibration of it, else fixed rates)."""
        devices = self.planned_device_names(config)
        kind = "gpu" if config.device_type == "gpu" else "cpu"
        calibration = cached_local_calibration(kind, devices)
        cost: CostModel = (
            StaticCostModel() if calibration is None else CalibratedCostModel(calibration)
        )
        built = build_tensor_parallel_graph(
            model,
            optimizer,
            config.batch_size,
            config.dtype,
            devices,
            cost,
            recompute=config.recompute,
        )
        return built.plan

    def plan(self, config: RunConfig, job: TrainingJob, at: PlanContext) -> DevicePlan:
        session, restore = at.session, at.restore
        cost: CostModel = (
            StaticCostModel() if at.calibration is None else CalibratedCostModel(at.calibration)
        )
        built = build_tensor_parallel_graph(
            job.model,
            job.optimizer,
            job.sampler.batch_size,
            config.dtype,
            session.device_names,
            cost,
            recompute=config.recompute,
        )
        at.progress(f"[{self.name}] {config.devices} ranks; {built.plan.notes[0]}")
        split = built.split
        parameters = restore.parameters or job.model.init_parameters(config.seed, config.dtype)
        slots = restore.optimizer_state
        specs = []
        for rank in range(config.devices):
            own, own_slots = rank_state(parameters, slots, split, rank, config.devices)
            worker = replace(
                make_worker_spec(session, job, rank, 1, restore),
                initial_parameters=own,
                initial_optimizer_state=own_slots,
            )
            specs.append(
                DeviceSpec(
                    worker,
                    built.plan.partitioned.partitions[session.device_names[rank]],
                    config.stall_timeout,
                )
            )
        plan = DevicePlan.uniform(
            session, setup_device, specs, run_resident_steps, range(config.devices)
        )

        def merge(snapshots: Sequence[dict]) -> tuple[dict, dict]:
            # Every rank's shards, joined whole (the checkpoint and result layout).
            return join_state(snapshots, split)

        return replace(plan, merge=merge)
