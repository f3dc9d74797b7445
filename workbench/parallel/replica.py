"""The worker side of synchronous data parallelism: one model replica resident on a device.

A replica is built once per run on its worker (dataset, graphs, variables) and kept in the
worker's device service; each step task then runs K steps: gradients on this replica's rows of
the global batch, a bucketed all-reduce with the peers, the average, the optimizer update.
Nothing but small step requests and summaries travel through the client.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.config import RunConfig
from workbench.data import GlobalBatchSampler, load_dataset, shard_rows
from workbench.ir import Executable
from workbench.models import build_model
from workbench.optim import LearningRateSchedule, init_slots, make_optimizer
from workbench.parallel.collectives import allreduce, broadcast, plan_buckets, reduce
from workbench.runtime.peer_transport import PeerTransport
from workbench.runtime.worker_service import device_service
from workbench.training.graphs import (
    DROPOUT_SEED,
    INPUTS,
    LABELS,
    LEARNING_RATE,
    build_training_graph,
    build_update_graph,
    gradient_name,
)
from workbench.training.session import dropout_seed


@dataclass(frozen=True)
class ReplicaSpec:
    """Everything a worker needs to build its replica (pickled to the worker once)."""

    run_id: str
    config: dict
    rank: int
    addresses: tuple[str, ...]
    device_names: tuple[str, ...]
    clock_origin: float
    stall_timeout: float
    algorithm: str
    groups: tuple[tuple[int, ...], ...]
    bucket_bytes: int
    total_steps: int
    central_storage: bool = False  # variables kept and updated on rank 0 only
    initial_parameters: dict | None = None
    initial_optimizer_state: dict | None = None


def config_from_dict(data: dict) -> RunConfig:
    return RunConfig(**{**data, "hidden": tuple(data["hidden"])})


class Replica:
    def __init__(self, spec: ReplicaSpec) -> None:
        self.spec = spec
        config = self.config = config_from_dict(spec.config)
        size = len(spec.addresses)
        dataset = load_dataset(config.dataset, seed=config.seed)
        self.model = build_model(
            config.model, dataset.input_shape, dataset.num_classes, config.hidden
        )
        optimizer = make_optimizer(config.optimizer)
        self.sampler = GlobalBatchSampler(len(dataset.y_train), config.batch_size, config.seed)
        self.schedule = LearningRateSchedule(
            config.lr or optimizer.default_learning_rate,
            config.batch_size,
            config.warmup_steps,
            config.lr_scaling,
            config.lr_decay,
            spec.total_steps,
        )
        self.rows = shard_rows(config.batch_size, spec.rank, size)
        local_batch = config.batch_size // size
        training = build_training_graph(self.model, None, local_batch, config.dtype)
        self.names = training.parameter_names
        self.gradients = Executable(training.graph)
        self.update = Executable(build_update_graph(self.model, optimizer, config.dtype))
        params = spec.initial_parameters or self.model.init_parameters(config.seed, config.dtype)
        slots = spec.initial_optimizer_state or init_slots(optimizer, params)
        self.state = {
            name: np.array(value, copy=True) for name, value in {**params, **slots}.items()
        }
        input_dtype = "int64" if self.model.takes_integer_input else config.dtype
        self.inputs = dataset.x_train.astype(input_dtype)
        self.labels = dataset.y_train
        self.transport = PeerTransport(
            spec.run_id, spec.rank, spec.addresses, spec.device_names, spec.stall_timeout
        )
        self.buckets = plan_buckets(
            self.model.parameter_shapes(), np.dtype(config.dtype).itemsize, spec.bucket_bytes
        )
        self.scale = np.dtype(config.dtype).type(1.0 / size)
        self.device = spec.device_names[spec.rank]

    def clock(self) -> float:
        return time.time() - self.spec.clock_origin

    def run(self, first: int, count: int) -> dict[str, Any]:
        events, losses = [], []
        for step in range(first, first + count):
            self.transport.step = step
            rows = self.sampler.batch_indices(step)[self.rows]
            feeds = {INPUTS: self.inputs[rows], LABELS: self.labels[rows]}
            if self.model.uses_dropout:
                feeds[DROPOUT_SEED] = dropout_seed(self.config.seed, step)
            start = self.clock()
            out = self.gradients.run(feeds, self.state)
            computed = self.clock()
            if self.spec.central_storage:
                events += self._central_update(step, out, start, computed)
            else:
                sent, received = self.transport.bytes_sent, self.transport.bytes_received
                averaged = self._allreduce(step, out)
                reduced = self.clock()
                self._apply(step, averaged)
                updated = self.clock()
                traffic = (
                    self.transport.bytes_sent - sent,
                    self.transport.bytes_received - received,
                )
                events += [
                    (self.device, "compute", step, start, computed, 0, 0),
                    (self.device, "allreduce", step, computed, reduced, *traffic),
                    (self.device, "update", step, reduced, updated, 0, 0),
                ]
            losses.append((step, float(out["loss"])))
        return {"events": events, "losses": losses}

    def _allreduce(self, step: int, out: dict) -> dict:
        averaged = {}
        for index, bucket in enumerate(self.buckets):
            local = {name: out[gradient_name(name)] for name in bucket.names}
            total = allreduce(
                self.transport,
                bucket.pack(local),
                f"s{step}/b{index}",
                self.spec.algorithm,
                self.spec.groups,
            )
            total *= self.scale  # the sum of per-replica means -> the global-batch mean
            averaged.update(bucket.unpack(total))
        return averaged

    def _apply(self, step: int, averaged: dict) -> None:
        feeds = {gradient_name(name): averaged[name] for name in self.names}
        feeds[LEARNING_RATE] = np.asarray(self.scale.dtype.type(self.schedule(step)))
        self.update.run(feeds, self.state)

    def _central_update(self, step: int, out: dict, start: float, computed: float) -> list:
        """CentralStorage: gradients go to the storage device (rank 0), which updates the only
        real copy of the variables and sends the new values back to every replica."""
        transport, central = self.transport, self.spec.rank == 0
        sent, received = transport.bytes_sent, transport.bytes_received
        averaged = {}
        for index, bucket in enumerate(self.buckets):
            local = {name: out[gradient_name(name)] for name in bucket.names}
            total = reduce(transport, bucket.pack(local), f"s{step}/g{index}")
            if central:
                total *= self.scale
                averaged.update(bucket.unpack(total))
        pushed = self.clock()
        pushed_bytes = (transport.bytes_sent - sent, transport.bytes_received - received)
        if central:
            self._apply(step, averaged)
        updated = self.clock()
        sent, received = transport.bytes_sent, transport.bytes_received
        for index, bucket in enumerate(self.buckets):
            values = bucket.pack(self.state) if central else np.empty(bucket.size, self.scale.dtype)
            fresh = broadcast(transport, values, f"s{step}/v{index}")
            if not central:
                for name, value in bucket.unpack(fresh).items():
                    self.state[name][...] = value
        pulled = self.clock()
        return [
            (self.device, "compute", step, start, computed, 0, 0),
            (self.device, "ps-push", step, computed, pushed, *pushed_bytes),
            (self.device, "update" if central else "idle", step, pushed, updated, 0, 0),
            (
                self.device,
                "ps-pull",
                step,
                updated,
                pulled,
                transport.bytes_sent - sent,
                transport.bytes_received - received,
            ),
        ]

    def snapshot(self) -> dict[str, dict[str, np.ndarray]]:
        names = set(self.names)
        return {
            "parameters": {n: self.state[n].copy() for n in self.names},
            "optimizer_state": {n: v.copy() for n, v in self.state.items() if n not in names},
        }


# --- task functions (run on the workers) --------------------------------------------------


def setup_replica(spec: ReplicaSpec) -> str:
    device_service().runs[spec.run_id] = Replica(spec)
    return spec.device_names[spec.rank]


def run_replica_steps(run_id: str, first: int, count: int) -> dict[str, Any]:
    return device_service().runs[run_id].run(first, count)


def replica_snapshot(run_id: str) -> dict[str, dict[str, np.ndarray]]:
    return device_service().runs[run_id].snapshot()


def drop_replica(run_id: str) -> None:
    service = device_service()
    service.runs.pop(run_id, None)
    service.mailbox.discard(run_id)
