"""``model-parallel``: one batch, the model's graph (forward, backward and updates) placed over
``--devices`` devices and partitioned with Send/Recv on every cut edge — the distributed
master's way. Every device runs its partition each step; the devices wait on each other along
the layer chain, which is why model parallelism scales poorly (watch the ``recv`` phases).
``--placement`` says who places the graph: the greedy placer with the costs the run measured
(``greedy``), the parameter-balanced layer split (``balanced-params``) or the model's device
constraints (``manual``). The graph is built in :mod:`workbench.parallel.model_parallel.graph`,
run on each device by :mod:`workbench.parallel.model_parallel.device`.
"""

from __future__ import annotations

from workbench.calibration.run_start import cached_local_calibration
from workbench.config import ConfigError, RunConfig
from workbench.costs import CalibratedCostModel, CostModel, StaticCostModel
from workbench.models import Sequential
from workbench.parallel.device_run import DevicePlan
from workbench.parallel.model_parallel.device import DeviceSpec, setup_device
from workbench.parallel.model_parallel.graph import ModelParallelPlan, build_model_parallel_graph
from workbench.parallel.resident_steps import run_resident_steps
from workbench.parallel.worker_spec import make_worker_spec
from workbench.passes import PlacementError
from workbench.passes.place import resolve_device
from workbench.strategies.cluster_strategy import ClusterStrategy, PlanContext
from workbench.strategies.definition import layers_fill
from workbench.strategies.options import PLACEMENT, ModelParallelOptions, PlacementName
from workbench.training.job import TrainingJob


class ModelParallel(ClusterStrategy):
    name = "model-parallel"
    description = "the graph placed over devices and partitioned, Send/Recv on cut edges"
    options = (PLACEMENT,)
    options_type = ModelParallelOptions
    planning = "workbench.planner.strategy_planning:MODEL_PARALLEL"

    def check_config(self, config: RunConfig) -> None:
        """Any device count: whether the model has enough layers is ``check_model``'s."""

    def placement(self, config: RunConfig) -> PlacementName:
        """Who places the graph (``--placement``)."""
        return config.options_of(ModelParallelOptions).placement

    def check_model(self, config: RunConfig, model: Sequential) -> None:
        constrained = [layer for layer in model.layers if layer.device]
        if self.placement(config) == "manual" and not constrained:
            raise ConfigError(
                "--placement",
                "manual places the layers where the model's device constraints put them, and "
                "no layer has one: build the layers inside `with workbench.device('/task:N'):` "
                "(or set their .device), or use --placement greedy or balanced-params",
            )
        kind = "gpu" if config.device_type == "gpu" else "cpu"
        for layer in constrained:
            try:
                resolve_device(layer.device, self.device_names(config, kind))
            except PlacementError as error:
                raise ConfigError("device constraint", f"layer {layer.name}: {error}") from None
        if self.placement(config) == "balanced-params" and not constrained:
            layers_fill(model, config.devices, "--devices")

    def summary_fields(self, config: RunConfig, log, devices: list[str]) -> dict:
        return {"placement": self.placement(config)}

    def graph_plan(self, config: RunConfig, model: Sequential, optimizer) -> ModelParallelPlan:
        """The plan a run would use, with the costs of the local cluster it would start: the
        run store's cached calibration of it, else fixed rates."""
        devices = self.planned_device_names(config)
        kind = "gpu" if config.device_type == "gpu" else "cpu"
        calibration = cached_local_calibration(kind, devices)
        if calibration is None:
            cost: CostModel = StaticCostModel()
            source = (
                f"{cost.describe()}; no calibration of a local {len(devices)}-device "
                f"{kind.upper()} cluster is cached (a run measures one)"
            )
        else:
            cost = CalibratedCostModel(calibration)
            source = (
                f"the cached calibration of the local {len(devices)}-device {kind.upper()} "
                f"cluster, {cost.describe()}"
            )
        return build_model_parallel_graph(
            model,
            optimizer,
            config.batch_size,
            config.dtype,
            devices,
            self.placement(config),
            cost,
            source,
            recompute=config.recompute,
        )

    def plan(self, config: RunConfig, job: TrainingJob, at: PlanContext) -> DevicePlan:
        session, progress, restore, calibration = (
            at.session,
            at.progress,
            at.restore,
            at.calibration,
        )
        if calibration is None:
            cost: CostModel = StaticCostModel()
        else:
            cost = CalibratedCostModel(calibration)
        graph = build_model_parallel_graph(
            job.model,
            job.optimizer,
            job.sampler.batch_size,
            config.dtype,
            session.device_names,
            self.placement(config),
            cost,
            recompute=config.recompute,
        )
        assert graph.prediction is not None
        busy = ", ".join(f"{1e3 * s:.1f}" for s in graph.prediction.schedule.busy.values())
        progress(
            f"[{self.name}] --placement {self.placement(config)}: "
            f"{len(graph.partitioned.transfers)} Send/Recv pairs per step; predicted busy ms "
            f"per device {busy}, step {1e3 * graph.prediction.schedule.seconds:.1f} ms"
        )
        specs = [
            DeviceSpec(
                make_worker_spec(session, job, rank, 1, restore),
                graph.partitioned.partitions[session.device_names[rank]],
                config.stall_timeout,
            )
            for rank in range(config.devices)
        ]
        # Each device holds its own layers' variables.
        return DevicePlan.uniform(
            session, setup_device, specs, run_resident_steps, range(config.devices)
        )
