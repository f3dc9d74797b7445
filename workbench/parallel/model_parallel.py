"""``model-parallel``: one batch, the model's graph (forward, backward and updates) placed over
``--devices`` devices and partitioned with Send/Recv on every cut edge — the distributed
master's way. Every device runs its partition each step; the devices wait on each other along
the layer chain, which is why model parallelism scales poorly (watch the ``recv`` phases).
"""

from __future__ import annotations

import contextlib

from workbench.events import EventLog
from workbench.parallel.data_parallel import worker_spec
from workbench.parallel.dispatch import submit_each, wait_all
from workbench.parallel.model_parallel_device import (
    DeviceSpec,
    device_snapshot,
    run_device_steps,
    setup_device,
)
from workbench.parallel.model_parallel_graph import build_model_parallel_graph
from workbench.parallel.replica import drop_replica
from workbench.parallel.step_loop import drive_steps
from workbench.runtime import device_name
from workbench.runtime.cluster import start_cluster
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

    def plan(self, job: TrainingJob):
        return build_model_parallel_graph(
            job.model,
            job.optimizer,
            job.sampler.batch_size,
            self.config.dtype,
            self.device_names(job.device_type),
        )

    def train(self, job: TrainingJob, log: EventLog, progress: Progress) -> TrainingSession:
        config = self.config
        devices = config.devices
        with start_cluster(devices, job.device_type, config.cluster) as session:
            plan = build_model_parallel_graph(
                job.model, job.optimizer, job.sampler.batch_size, config.dtype, session.device_names
            )
            if session.dashboard_link:
                progress(f"[{self.name}] Dask dashboard: {session.dashboard_link}")
            progress(f"[{self.name}] {len(plan.partitioned.transfers)} Send/Recv pairs per step")
            specs = [
                (
                    DeviceSpec(
                        worker_spec(session, job, rank, 1),
                        plan.partitioned.partitions[session.device_names[rank]],
                        config.stall_timeout,
                    ),
                )
                for rank in range(devices)
            ]
            ready = submit_each(session, self.name, "setup", None, setup_device, specs)
            wait_all(session, ready, "setup", None, config.stall_timeout + 120)
            try:
                drive_steps(
                    session,
                    job,
                    log,
                    progress,
                    self.name,
                    run_device_steps,
                    lambda step, count: [(session.run_id, step, count)] * devices,
                )
                snapshots = wait_all(
                    session,
                    submit_each(
                        session,
                        self.name,
                        "snapshot",
                        None,
                        device_snapshot,
                        [(session.run_id,)] * devices,
                    ),
                    "gathering variables",
                    job.total_steps,
                    config.stall_timeout,
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
