"""``model-parallel``: one batch, the model's graph (forward, backward and updates) placed over
``--devices`` devices and partitioned with Send/Recv on every cut edge — the distributed
master's way. Every device runs its partition each step; the devices wait on each other along
the layer chain, which is why model parallelism scales poorly (watch the ``recv`` phases).
The graph is built in :mod:`workbench.parallel.model_parallel.graph`, run on each device by
:mod:`workbench.parallel.model_parallel.device`.
"""

from __future__ import annotations

from workbench.config import ConfigError, RunConfig
from workbench.models import Sequential
from workbench.parallel.device_run import DevicePlan
from workbench.parallel.model_parallel.device import DeviceSpec, setup_device
from workbench.parallel.model_parallel.graph import ModelParallelPlan, build_model_parallel_graph
from workbench.parallel.resident_steps import run_resident_steps
from workbench.parallel.worker_spec import make_worker_spec
from workbench.passes import PlacementError
from workbench.passes.place import resolve_device
from workbench.runtime.cluster import ClusterSession
from workbench.strategies.cluster_strategy import ClusterStrategy
from workbench.strategies.definition import layers_fill
from workbench.training.job import Progress, TrainingJob


class ModelParallel(ClusterStrategy):
    name = "model-parallel"
    description = "the graph placed over devices and partitioned, Send/Recv on cut edges"
    options = ()

    def check_config(self, config: RunConfig) -> None:
        """Any device count: whether the model has enough layers is ``check_model``'s."""

    def check_model(self, config: RunConfig, model: Sequential) -> None:
        if any(layer.device for layer in model.layers):
            kind = "gpu" if config.device_type == "gpu" else "cpu"
            for layer in model.layers:
                if layer.device:
                    try:
                        resolve_device(layer.device, self.device_names(config, kind))
                    except PlacementError as error:
                        raise ConfigError(
                            "device constraint", f"layer {layer.name}: {error}"
                        ) from None
            return
        layers_fill(model, config.devices, "--devices")

    def graph_plan(self, config: RunConfig, model: Sequential, optimizer) -> ModelParallelPlan:
        devices = self.planned_device_names(config)
        return build_model_parallel_graph(
            model, optimizer, config.batch_size, config.dtype, devices
        )

    def plan(
        self, config: RunConfig, job: TrainingJob, session: ClusterSession, progress: Progress
    ) -> DevicePlan:
        graph = build_model_parallel_graph(
            job.model, job.optimizer, job.sampler.batch_size, config.dtype, session.device_names
        )
        progress(f"[{self.name}] {len(graph.partitioned.transfers)} Send/Recv pairs per step")
        specs = [
            DeviceSpec(
                make_worker_spec(session, job, rank, 1),
                graph.partitioned.partitions[session.device_names[rank]],
                config.stall_timeout,
            )
            for rank in range(config.devices)
        ]
        # Each device holds its own layers' variables.
        return DevicePlan.uniform(
            session, setup_device, specs, run_resident_steps, range(config.devices)
        )
