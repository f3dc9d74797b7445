"""``model-parallel``: one batch, the model's graph (forward, backward and updates) placed over
``--devices`` devices and partitioned with Send/Recv on every cut edge — the distributed
master's way. Every device runs its partition each step; the devices wait on each other along
the layer chain, which is why model parallelism scales poorly (watch the ``recv`` phases).
"""

from __future__ import annotations

from workbench.events import EventLog
from workbench.parallel.data_parallel import worker_spec
from workbench.parallel.device_run import DevicePlan, SetupGroup, run_on_devices
from workbench.parallel.model_parallel_device import (
    DeviceSpec,
    run_device_steps,
    setup_device,
)
from workbench.parallel.model_parallel_graph import build_model_parallel_graph
from workbench.runtime import device_name
from workbench.training.job import Progress, TrainingJob
from workbench.training.session import TrainingSession


class ModelParallelStrategy:
    name = "model-parallel"

    def __init__(self, config) -> None:
        self.config = config

    def device_names(self, device_type: str) -> list[str]:
        return [device_name(device_type, task=rank) for rank in range(self.config.devices)]

    def check_model(self, model) -> None:
        from workbench.config import ConfigError
        from workbench.parallel.pipeline.stages import StageError, split_layers
        from workbench.passes import PlacementError
        from workbench.passes.place import resolve_device

        if any(layer.device for layer in model.layers):
            kind = "gpu" if self.config.device_type == "gpu" else "cpu"
            for layer in model.layers:
                if layer.device:
                    try:
                        resolve_device(layer.device, self.device_names(kind))
                    except PlacementError as error:
                        raise ConfigError(
                            "device constraint", f"layer {layer.name}: {error}"
                        ) from None
            return
        try:
            split_layers(model, self.config.devices)
        except StageError as error:
            raise ConfigError(
                "--devices", str(error).split(": ", 1)[1].replace("stages", "devices")
            ) from None

    def train(self, job: TrainingJob, log: EventLog, progress: Progress) -> TrainingSession:
        config = self.config

        def plan(session) -> DevicePlan:
            graph = build_model_parallel_graph(
                job.model, job.optimizer, job.sampler.batch_size, config.dtype, session.device_names
            )
            transfers = len(graph.partitioned.transfers)
            progress(f"[{self.name}] {transfers} Send/Recv pairs per step")
            ranks = range(config.devices)
            specs = [
                DeviceSpec(
                    worker_spec(session, job, rank, 1),
                    graph.partitioned.partitions[session.device_names[rank]],
                    config.stall_timeout,
                )
                for rank in ranks
            ]
            return DevicePlan(
                setups=[SetupGroup(setup_device, specs, ranks)],
                step_function=run_device_steps,
                step_arguments=lambda step, count: [(session.run_id, step, count)] * len(ranks),
                step_ranks=ranks,
                snapshot_ranks=ranks,  # each device holds its layers' variables
            )

        return run_on_devices(self.name, job, log, progress, config.devices, plan)
