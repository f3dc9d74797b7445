"""The worker side of synchronous data parallelism: one model replica resident on a device.

Each step task runs K steps: gradients on this replica's rows of the global batch, a bucketed
all-reduce with the peers (or, for central storage, a reduce to the storage device, which
updates and broadcasts the variables), then the identical optimizer update on every replica.
Nothing but small step requests and summaries travel through the client.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.ir import Executable
from workbench.parallel.collectives import allreduce, broadcast, plan_buckets, reduce
from workbench.parallel.collectives.compression import compressed_allreduce
from workbench.parallel.collectives.nccl import NcclAllReduce
from workbench.parallel.data_parallel.gradient_worker import GradientWorker
from workbench.parallel.worker_spec import WorkerSpec
from workbench.runtime.peer_transport import PeerTransport
from workbench.runtime.worker_service import device_service
from workbench.training.graphs import LEARNING_RATE, build_update_graph, gradient_name


@dataclass(frozen=True)
class ReplicaSpec:
    worker: WorkerSpec
    stall_timeout: float
    algorithm: str
    groups: tuple[tuple[int, ...], ...]
    bucket_bytes: int
    central_storage: bool = False  # variables kept and updated on rank 0 only
    compression: str = "none"  # "float16": gradients travel as float16


class Replica(GradientWorker):
    def __init__(self, spec: ReplicaSpec) -> None:
        super().__init__(spec.worker)
        self.replica_spec = spec
        self.update = Executable(build_update_graph(self.model, self.optimizer, self.config.dtype))
        self.transport = PeerTransport(
            self.spec.run_id,
            self.spec.rank,
            self.spec.addresses,
            self.spec.device_names,
            spec.stall_timeout,
            self.arrays,
        )
        self.nccl = (
            NcclAllReduce(self.transport, self.arrays.runtime) if spec.algorithm == "nccl" else None
        )
        self.buckets = plan_buckets(
            self.model.parameter_shapes(), np.dtype(self.config.dtype).itemsize, spec.bucket_bytes
        )
        self.scale = self.dtype(1.0 / self.spec.replicas)
        self.bucket_of = {name: i for i, b in enumerate(self.buckets) for name in b.names}
        # One thread: buckets are reduced one after another, in the order they completed.
        self.communication = ThreadPoolExecutor(1, thread_name_prefix="allreduce")

    def run(self, first: int, count: int) -> dict[str, Any]:
        events, losses = [], []
        for step in range(first, first + count):
            self.transport.step = step
            start = self.clock()
            sent, received = self.transport.bytes_sent, self.transport.bytes_received
            reductions: list = []
            overlap = None if self.replica_spec.central_storage else self._overlap(step, reductions)
            gradients, loss = self.compute(step, on_fetch=overlap)
            computed = self.clock()
            if self.replica_spec.central_storage:
                events += self._central_update(step, gradients, start, computed)
            else:
                averaged = self._finish_reductions(step, reductions)
                reduced = self.clock()
                self._apply(step, averaged)
                updated = self.clock()
                traffic = (
                    self.transport.bytes_sent - sent,
                    self.transport.bytes_received - received,
                )
                first_bucket = reductions[0][2] if reductions else computed
                events += [
                    (self.device, "compute", step, start, computed, 0, 0),
                    # Starts inside the backward pass: the overlap is visible on the timeline.
                    (self.device, "allreduce", step, first_bucket, reduced, *traffic, self.path),
                    (self.device, "update", step, reduced, updated, 0, 0),
                ]
            losses.append((step, loss))
        return {"events": events, "losses": losses}

    def _overlap(self, step: int, reductions: list):
        """A callback for the backward pass: when the last gradient of a bucket appears, the
        bucket goes to the communication thread while backward continues (DDP's overlap).
        Buckets complete in the same order on every replica (same graph, same schedule), and
        the one communication thread reduces them in that order, so the collectives match."""
        filled: dict[int, dict] = {index: {} for index in range(len(self.buckets))}

        def gradient_ready(key: str, value) -> None:
            name = key.removeprefix("grad/")
            if name == key:
                return
            index = self.bucket_of[name]
            filled[index][name] = value
            bucket = self.buckets[index]
            if len(filled[index]) == len(bucket.names):
                flat = bucket.pack(filled.pop(index), self.xp)
                future = self.communication.submit(self._reduce, flat, f"s{step}/b{index}")
                reductions.append((index, future, self.clock()))

        return gradient_ready

    def _finish_reductions(self, step: int, reductions: list) -> dict:
        averaged = {}
        for index, future, _ in reductions:
            total = future.result()
            total *= self.scale  # the sum of per-replica means -> the global-batch mean
            averaged.update(self.buckets[index].unpack(total))
        if len(averaged) != len(self.names):
            raise RuntimeError(
                f"step {step}: only {len(averaged)} of {len(self.names)} gradients were reduced"
            )
        return averaged

    @property
    def path(self) -> str:
        """How this replica's gradients travel (the all-reduce events say it)."""
        return self.nccl.path if self.nccl is not None else self.transport.paths_taken()

    def _reduce(self, flat, key: str):
        spec = self.replica_spec
        if self.nccl is not None:
            return self.nccl(flat)

        def reduce(transport, array, name):
            # The packed bucket is this step's own buffer: reduce into it, no copy.
            return allreduce(transport, array, name, spec.algorithm, spec.groups, inplace=True)

        if spec.compression == "float16":
            return compressed_allreduce(reduce, self.transport, flat, key)
        return reduce(self.transport, flat, key)

    def _apply(self, step: int, averaged: dict) -> None:
        feeds = {gradient_name(name): averaged[name] for name in self.names}
        feeds[LEARNING_RATE] = self.learning_rate(step)
        self.update.run(feeds, self.state, self.xp)

    def _central_update(self, step: int, gradients: dict, start: float, computed: float) -> list:
        """CentralStorage: gradients go to the storage device (rank 0), which updates the only
        real copy of the variables and sends the new values back to every replica."""
        transport, central = self.transport, self.spec.rank == 0
        sent, received = transport.bytes_sent, transport.bytes_received
        averaged = {}
        for index, bucket in enumerate(self.buckets):
            total = reduce(transport, bucket.pack(gradients, self.xp), f"s{step}/g{index}")
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
            values = (
                bucket.pack(self.state, self.xp)
                if central
                else self.xp.empty(bucket.size, self.dtype)
            )
            fresh = broadcast(transport, values, f"s{step}/v{index}")
            if not central:
                for name, value in bucket.unpack(fresh).items():
                    self.state[name][...] = value
        pulled = self.clock()
        return [
            (self.device, "compute", step, start, computed, 0, 0),
            (self.device, "ps-push", step, computed, pushed, *pushed_bytes, self.path),
            (self.device, "update" if central else "idle", step, pushed, updated, 0, 0),
            (
                self.device,
                "ps-pull",
                step,
                updated,
                pulled,
                transport.bytes_sent - sent,
                transport.bytes_received - received,
                self.path,
            ),
        ]


# --- task functions (run on the workers) --------------------------------------------------


def setup_replica(spec: ReplicaSpec) -> str:
    device_service().runs[spec.worker.run_id] = Replica(spec)
    return spec.worker.device_names[spec.worker.rank]
