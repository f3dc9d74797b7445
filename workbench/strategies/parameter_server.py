"""``parameter-server``: TF's ``ParameterServerStrategy`` on Dask workers.

``--devices N`` workers compute; ``--ps K`` more workers are parameter-server shards holding
the variables (size-balanced). Each step a worker pulls the variables, computes gradients on its
slice of the batch and pushes them. ``--mode sync`` averages all N pushes per update (equal to
one-device); ``--mode async`` applies each push on arrival, optionally bounded by
``--staleness S``. ``--replication between-graph`` (default): each worker builds its replica
and reads its own data; ``in-graph``: the client holds the data and ships each worker its batch
every step, so all input flows through one node. The device side is
:mod:`workbench.parallel.parameter_server`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workbench.calibration.exchange_probe import EXCHANGE_KINDS, measure_exchange
from workbench.calibration.run_start import RunCalibration
from workbench.config import ConfigError, RunConfig
from workbench.costs import collective_key
from workbench.data import shard_rows
from workbench.events import EventLog
from workbench.optim import init_slots
from workbench.parallel.collectives.compression import compression_summary
from workbench.parallel.device_run import DevicePlan, SetupGroup, merged_state
from workbench.parallel.parameter_server.client_graph import (
    ParameterServerGraph,
    build_parameter_server_graph,
)
from workbench.parallel.parameter_server.free_running import FreeRunningDriver
from workbench.parallel.parameter_server.partitioner import (
    VariablePiece,
    join_parts,
    place_variables,
    shard_bytes,
    split_state,
)
from workbench.parallel.parameter_server.shard_service import ShardSpec, setup_shard
from workbench.parallel.parameter_server.worker_loop import (
    ParameterServerWorkerSpec,
    setup_ps_worker,
)
from workbench.parallel.resident_steps import run_resident_steps
from workbench.parallel.worker_spec import make_worker_spec
from workbench.runtime import device_name
from workbench.runtime.cluster import ClusterSession
from workbench.strategies.cluster_strategy import ClusterStrategy, Known, PlanContext
from workbench.strategies.definition import replicas_divide_the_batch
from workbench.strategies.options import (
    BACKUP_WORKERS,
    COMPRESSION,
    MODE,
    PS,
    PS_PARTITION_MIN_BYTES,
    REPLICATION,
    STALENESS,
    ParameterServerOptions,
)
from workbench.training.graphs import build_training_graph
from workbench.training.job import Progress, TrainingJob


class ParameterServer(ClusterStrategy):
    name = "parameter-server"
    description = "variables sharded over PS tasks; workers pull, compute, push (sync or async)"
    options = (
        PS,
        MODE,
        STALENESS,
        REPLICATION,
        BACKUP_WORKERS,
        PS_PARTITION_MIN_BYTES,
        COMPRESSION,
    )
    options_type = ParameterServerOptions
    planning = "workbench.planner.strategy_planning:PARAMETER_SERVER"

    def check_config(self, config: RunConfig) -> None:
        replicas_divide_the_batch(config)
        options = config.options_of(ParameterServerOptions)
        if options.staleness is not None and options.mode != "async":
            raise ConfigError("--staleness", f"bounds async updates; add {STALENESS.applies_with}")
        if options.backup_workers and options.mode != "sync":
            raise ConfigError(
                "--backup-workers",
                f"drops the late gradients of synchronous steps; add {BACKUP_WORKERS.applies_with}",
            )
        free_running = options.mode == "async" or options.backup_workers
        if options.replication == "in-graph" and free_running:
            raise ConfigError(
                "--replication",
                "in-graph ships every worker its batches with each chunk of synchronous steps; "
                "free-running workers (--mode async, --backup-workers) read their own: use "
                "--replication between-graph",
            )
        if options.backup_workers >= config.devices:
            raise ConfigError(
                "--backup-workers",
                f"{options.backup_workers} backups of {config.devices} workers (--devices) would "
                f"leave no gradient to apply; choose 0 to {config.devices - 1}",
            )

    def device_names(self, config: RunConfig, device_type: str) -> list[str]:
        workers = [device_name(device_type, task=t) for t in range(config.devices)]
        shards = config.options_of(ParameterServerOptions).ps
        return workers + [device_name(device_type, task=t, job="ps") for t in range(shards)]

    wires = ("rpc", "peer")  # pulls and pushes are Dask RPCs; in-graph runs use Send/Recv

    def device_batch_sizes(self, config: RunConfig) -> tuple[int, ...]:
        return (config.batch_size // config.devices,)

    def jobs(self, config: RunConfig) -> tuple[tuple[str, int], ...]:
        return (("worker", config.devices), ("ps", config.options_of(ParameterServerOptions).ps))

    def device_count(self, config: RunConfig) -> int:
        return config.devices + config.options_of(ParameterServerOptions).ps

    def _calibrated(
        self, job: TrainingJob, session: ClusterSession, progress: Progress, so_far: Known
    ) -> RunCalibration:
        """Besides nodes and links, the workers' pulls and pushes as they run them, all
        workers calling the shards at once (once per cluster, then cached), for the
        planner's prediction."""
        so_far = super()._calibrated(job, session, progress, so_far)
        config = job.config
        options = config.options_of(ParameterServerOptions)
        worker_ranks = list(range(config.devices))
        shard_ranks = list(range(config.devices, config.devices + options.ps))
        devices = [session.device_names[rank] for rank in worker_ranks + shard_ranks]
        held = shard_bytes(
            self.pieces(config, job.model), options.ps, np.dtype(config.dtype).itemsize
        )

        def measure(missing: list[str]) -> dict[str, Any]:
            # Built only when something is to be measured (a cached calibration needs none).
            graph = build_training_graph(
                job.model, None, config.batch_size // config.devices, config.dtype
            ).graph
            fits, stretch = measure_exchange(
                session,
                worker_ranks,
                shard_ranks,
                held,
                graph,
                stall_timeout=config.stall_timeout,
            )
            return {
                "collectives": fits,
                "compute_stretch": {collective_key("ps-exchange", devices): stretch},
            }

        keys = [collective_key(kind, devices) for kind in (*EXCHANGE_KINDS, "ps-exchange")]
        return self._measure_more(job, session, progress, keys, measure, so_far)

    def plan(self, config: RunConfig, job: TrainingJob, at: PlanContext) -> DevicePlan:
        session, restore = at.session, at.restore
        options = config.options_of(ParameterServerOptions)
        model, workers, shards = job.model, config.devices, options.ps
        params = restore.parameters or model.init_parameters(config.seed, config.dtype)
        slots = restore.optimizer_state or init_slots(job.optimizer, params)
        in_graph = options.replication == "in-graph"
        # Async workers, and sync ones with backups, loop on their own: no client barrier.
        free_running = options.mode == "async" or options.backup_workers > 0
        per_step = workers if options.mode == "async" else 1
        worker_ranks = list(range(workers))
        shard_ranks = list(range(workers, workers + shards))
        pieces = self.pieces(config, model)
        stores = split_state(pieces, params, slots)
        # In-graph: this client builds the one graph of every tower. Between-graph: each worker
        # builds its own; the shards run their part of worker 0's (the same for every worker).
        client_graph = self.client_graph(
            config, job.model, job.optimizer, session.device_names, pieces
        )
        shard_specs = [
            ShardSpec(
                run_id=session.run_id,
                config=config.to_dict(),
                shard=k,
                workers=workers,
                total_steps=job.total_steps,
                stall_timeout=config.stall_timeout,
                store=stores[k] if k < len(stores) else {},
                client_graph=client_graph,
                model=model,
                device=session.device_names[shard_ranks[k]],
                clock_origin=job.clock_origin,
                device_type=session.device_type,
                first_step=restore.step,
                total_updates=job.total_steps * per_step if free_running else None,
                backups=options.backup_workers,
                in_graph=in_graph,
                mode=options.mode,
                staleness=options.staleness,
                rank=shard_ranks[k],
                addresses=tuple(session.addresses),
                device_names=tuple(session.device_names),
                worker_ranks=tuple(worker_ranks),
            )
            for k in range(shards)
        ]

        def worker_spec(rank: int) -> ParameterServerWorkerSpec:
            return ParameterServerWorkerSpec(
                worker=make_worker_spec(
                    session, job, rank, workers, restore, reads_own_data=not in_graph
                ),
                shard_addresses=tuple(session.addresses[r] for r in shard_ranks),
                shard_devices=tuple(session.device_names[r] for r in shard_ranks),
                shard_ranks=tuple(shard_ranks),
                pieces=pieces,
                client_graph=client_graph if in_graph else None,
                mode=options.mode,
                compression=options.compression,
            )

        worker_specs = [worker_spec(rank) for rank in worker_ranks]
        driver = None
        if free_running:
            driver = FreeRunningDriver(
                worker_ranks,
                shard_ranks,
                setup_ps_worker,
                worker_spec,
                updates_per_step=workers if options.mode == "async" else 1,
            )
        return DevicePlan(
            # Shards first: workers pull from them as soon as they start.
            setups=[
                SetupGroup(setup_shard, shard_specs, shard_ranks),
                SetupGroup(setup_ps_worker, worker_specs, worker_ranks),
            ],
            step_function=run_resident_steps,
            step_arguments=self._step_arguments(config, session, job, in_graph),
            step_ranks=worker_ranks,
            snapshot_ranks=shard_ranks,  # the shards hold the variables
            driver=driver,
            # A partitioned variable's parts come back from several shards: join them.
            merge=lambda snapshots: tuple(
                join_parts(pieces, state) for state in merged_state(snapshots)
            ),
        )

    def pieces(self, config: RunConfig, model) -> tuple[VariablePiece, ...]:
        """The variables, or their parts, and the shard each lives on."""
        itemsize = np.dtype(config.dtype).itemsize
        options = config.options_of(ParameterServerOptions)
        return tuple(
            place_variables(
                model.parameter_shapes(), options.ps, itemsize, options.ps_partition_min_bytes
            )
        )

    def graph_plan(self, config: RunConfig, model, optimizer) -> ParameterServerGraph:
        names = self.planned_device_names(config)
        return self.client_graph(config, model, optimizer, names, self.pieces(config, model))

    def client_graph(
        self, config: RunConfig, model, optimizer, device_names, pieces
    ) -> ParameterServerGraph:
        """The client graph the master places and partitions: every worker's tower
        (in-graph), or worker 0's alone (between-graph)."""
        options = config.options_of(ParameterServerOptions)
        towers = config.devices if options.replication == "in-graph" else 1
        return build_parameter_server_graph(
            model,
            optimizer,
            config.batch_size // config.devices,
            config.dtype,
            list(device_names[:towers]),
            list(device_names[config.devices : config.devices + options.ps]),
            pieces,
            in_graph=options.replication == "in-graph",
        )

    def _step_arguments(self, config: RunConfig, session, job: TrainingJob, in_graph: bool):
        workers = config.devices

        def arguments(step: int, count: int) -> list[tuple]:
            if not in_graph:
                return [(session.run_id, step, count)] * workers
            # In-graph replication: this client reads the data and ships every slice.
            dtype = "int64" if job.model.takes_integer_input else config.dtype
            inputs = job.dataset.model_inputs("train", dtype)
            per_worker = []
            for rank in range(workers):
                rows = shard_rows(job.sampler.batch_size, rank, workers)
                batches = []
                for current in range(step, step + count):
                    index = job.sampler.batch_indices(current)[rows]
                    batches.append((inputs[index], job.dataset.y_train[index]))
                per_worker.append((session.run_id, step, count, batches))
            return per_worker

        return arguments

    def summary_fields(
        self, config: RunConfig, log: EventLog, devices: list[str]
    ) -> dict[str, Any]:
        pushes = [e for e in log.phases() if e.phase in ("ps-push", "dropped")]
        fields: dict[str, Any] = {
            # Pushes each worker had applied (a shard's own push records are not counted).
            "per_device": [
                {"updates": sum(e.device == d and e.phase == "ps-push" for e in pushes)}
                if d in devices[: config.devices]
                else {}
                for d in devices
            ],
            "dropped_gradients": sum(e.phase == "dropped" for e in pushes),
        }
        compression = config.options_of(ParameterServerOptions).compression
        if compression != "none":  # what the workers' pushes saved
            workers = devices[: config.devices]
            fields["compression"] = compression_summary(compression, log, workers, "ps-push")
        staleness = [event.value for event in log.scalars("staleness")]
        if not staleness:
            return fields
        # Staleness of every applied update (updates between a worker's read and its push).
        return fields | {
            "staleness": {
                "max": int(max(staleness)),
                "mean": float(np.mean(staleness)),
                "updates": len(staleness),
                "histogram": {
                    str(int(k)): int(v) for k, v in zip(*np.unique(staleness, return_counts=True))
                },
            }
        }
