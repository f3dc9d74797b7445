"""The worker side of synchronous data parallelism: one model replica resident on a device.

Each step task runs K steps: gradients on this replica's rows of the global batch, a bucketed
all-reduce with the peers (or, for central storage, a reduce to the storage device, which
updates and broadcasts the variables), then the identical optimizer update on every replica.
Nothing but small step requests and summaries travel through the client.

With ``--compression`` the buckets go through a codec
(:mod:`workbench.parallel.collectives.compression`); with fp16/bf16, or ``--precision
mixed-*`` (:mod:`workbench.parallel.mixed_precision`), a step whose sum overflowed is skipped
on every replica. Besides events and losses, a task reports scalars: its gradients'
uncompressed bytes (``gradient_bytes``), from replica 0, ``loss_scale`` and
``skipped_steps``, and the most the device held during its steps (``memory/...``:
:mod:`workbench.runtime.device_memory`).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from workbench.events.records import Phase, PhaseEvent, StepReport
from workbench.ir import Executable
from workbench.parallel.collectives import allreduce, broadcast, plan_buckets, reduce
from workbench.parallel.collectives.compression import (
    PushEncoder,
    bucket_codec,
    decode,
    dense_allreduce_bytes,
    parse_compression,
    receive_payload,
    send_payload,
)
from workbench.parallel.collectives.nccl import NcclAllReduce
from workbench.parallel.data_parallel.gradient_worker import GradientWorker
from workbench.parallel.mixed_precision import mixed_precision_scaler, refresh_compute_copy
from workbench.parallel.resident_steps import keep_resident
from workbench.parallel.stop_gate import may_begin
from workbench.parallel.worker_spec import WorkerSpec
from workbench.runtime.peer_transport import PeerTransport
from workbench.training.graphs import LEARNING_RATE, build_update_graph, gradient_name


@dataclass(frozen=True)
class ReplicaSpec:
    worker: WorkerSpec
    stall_timeout: float
    algorithm: str
    groups: tuple[tuple[int, ...], ...]
    bucket_bytes: int
    central_storage: bool = False  # variables kept and updated on rank 0 only
    compression: str = "none"  # a --compression value: none, fp16, bf16, topk:R, powersgd:R


class Replica(GradientWorker):
    def __init__(self, spec: ReplicaSpec) -> None:
        super().__init__(spec.worker)
        self.replica_spec = spec
        self.update = Executable(
            build_update_graph(
                self.model, self.optimizer, self.config.dtype, precision=self.config.precision
            )
        )
        self.transport = PeerTransport(
            self.spec.run_id,
            self.spec.rank,
            self.spec.addresses,
            self.spec.device_names,
            spec.stall_timeout,
            self.arrays,
        )
        self.nccl = (
            NcclAllReduce(self.transport, self.arrays.runtime, spec.stall_timeout)
            if spec.algorithm == "nccl"
            else None
        )
        self.buckets = plan_buckets(
            self.model.parameter_shapes(), np.dtype(self.config.dtype).itemsize, spec.bucket_bytes
        )
        self.scale = self.dtype(1.0 / self.spec.replicas)
        self.bucket_of = {name: i for i, b in enumerate(self.buckets) for name in b.names}
        # One thread: buckets are reduced one after another, in the order they completed.
        self.communication = ThreadPoolExecutor(1, thread_name_prefix="allreduce")
        self.compression = parse_compression(spec.compression)
        self.codec = bucket_codec(
            self.compression,
            self.transport,
            self._dense_allreduce,
            self.buckets,
            float(self.scale),
            self.config.seed,
        )
        # The dynamic loss scaler: --compression fp16/bf16 scales the wire with it, --precision
        # mixed-* the loss; with both, the one scaler does both and moves once a step.
        self.scaler = self.codec.scaler or mixed_precision_scaler(self.config.precision)
        # Central storage pushes each gradient to rank 0 through a push codec (one receiver).
        self.push_encoder = (
            PushEncoder(self.compression, self.config.seed)
            if spec.central_storage and self.compression.compresses
            else None
        )
        self.overflow_steps = (
            frozenset(self.config.simulate_overflow) if self.spec.rank == 0 else ()
        )

    def run(self, first: int, count: int) -> StepReport:
        events: list[PhaseEvent] = []
        losses: list[tuple[int, float | None]] = []
        scalars, gradient_bytes = [], 0
        last = first - 1
        for step in range(first, first + count):
            if not may_begin(self.spec.run_id, step):
                break  # the run was stopped (docs/architecture/faults.md, "Faults and stragglers")
            last = step
            self.transport.step = step
            self.memory.begin(self.state)
            start = self.clock()
            sent, received = self.transport.bytes_sent, self.transport.bytes_received
            reductions: list = []
            overlap = None if self.replica_spec.central_storage else self._overlap(step, reductions)
            gradients, loss = self.compute(step, on_fetch=overlap)
            for gradient in gradients.values():  # live until the step ends
                self.memory.hold("gradients", gradient)
            computed = self.clock()
            if self.replica_spec.central_storage:
                step_events, applied = self._central_update(step, gradients, start, computed)
                events += step_events
                gradient_bytes += self._dense_push_bytes(step_events[1].bytes)
            else:
                averaged, applied = self._finish_reductions(step, reductions)
                reduced = self.clock()
                if applied:
                    self._apply(step, averaged)
                updated = self.clock()
                traffic = (
                    self.transport.bytes_sent - sent,
                    self.transport.bytes_received - received,
                )
                gradient_bytes += self._dense_allreduce_bytes(traffic[0])
                first_bucket = reductions[0][2] if reductions else computed
                events += [
                    PhaseEvent(self.device, Phase.COMPUTE, step, start, computed),
                    # Starts inside the backward pass: the overlap is visible on the timeline.
                    PhaseEvent(
                        self.device,
                        Phase.ALLREDUCE,
                        step,
                        first_bucket,
                        reduced,
                        *traffic,
                        self.path,
                    ),
                    PhaseEvent(self.device, Phase.UPDATE, step, reduced, updated),
                ]
            self.memory.end()
            losses.append((step, loss))
            scalars += self._scaler_reports(step, applied)
        if last >= first:
            scalars.append(("gradient_bytes", last, gradient_bytes, self.device))
            scalars += self.memory.report(last)
        return {"events": events, "losses": losses, "scalars": scalars}

    def loss_scale(self) -> float:
        return self.scaler.scale if self.scaler is not None else 1.0

    def _scaler_reports(self, step: int, applied: bool) -> list[tuple]:
        """Replica 0 reports the loss scaler (every replica's is the same)."""
        if self.scaler is None or self.spec.rank != 0:
            return []
        reports = [("loss_scale", step, self.scaler.scale, None)]
        if not applied:
            reports.append(("skipped_steps", step, self.scaler.skipped_steps, None))
        return reports

    def _dense_allreduce_bytes(self, sent: int) -> int:
        """What this step's buckets would have sent uncompressed (``sent`` if they were)."""
        if not self.compression.compresses:
            return sent
        spec, itemsize = self.replica_spec, np.dtype(self.config.dtype).itemsize
        return sum(
            dense_allreduce_bytes(
                spec.algorithm, spec.groups, b.size, itemsize, self.spec.rank, self.spec.replicas
            )
            for b in self.buckets
        )

    def _dense_push_bytes(self, sent: int) -> int:
        """What this step's push to the storage device would have been uncompressed."""
        if not self.compression.compresses:
            return sent
        itemsize = np.dtype(self.config.dtype).itemsize
        return 0 if self.spec.rank == 0 else sum(b.size for b in self.buckets) * itemsize

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
                self.memory.hold("communication", flat)
                self._simulate_overflow(step, flat)
                future = self.communication.submit(self._reduce, flat, f"s{step}/b{index}", index)
                # Mid-backward: a device wait here would stall the kernels still to launch.
                reductions.append((index, future, self.elapsed()))

        return gradient_ready

    def _simulate_overflow(self, step: int, gradient) -> None:
        """``--simulate-overflow STEP``: replica 0's gradient is infinite at STEP, before it
        is compressed, so the loss scaler's skip can be watched."""
        if step in self.overflow_steps:
            gradient[...] = float("inf")

    def _finish_reductions(self, step: int, reductions: list) -> tuple[dict, bool]:
        """The averaged gradients, and whether the step's update applies (False: the loss
        scaler saw inf or NaN in the sum, which every replica sees alike)."""
        averaged, totals = {}, []
        for index, future, _ in reductions:
            total = future.result()
            self.memory.hold("communication", total)  # the bucket itself, reduced in place
            total *= self.scale  # the sum of per-replica means -> the global-batch mean
            totals.append(total)
            averaged.update(self.buckets[index].unpack(total))
        if len(averaged) != len(self.names):
            raise RuntimeError(
                f"step {step}: only {len(averaged)} of {len(self.names)} gradients were reduced"
            )
        return averaged, self._scaler_accepts(totals)

    def _scaler_accepts(self, totals: list) -> bool:
        if self.scaler is None:
            return True
        finite = all(bool(self.xp.all(self.xp.isfinite(total))) for total in totals)
        return self.scaler.update(finite)

    @property
    def path(self) -> str:
        """How this replica's gradients travel (the all-reduce events say it)."""
        return self.nccl.path if self.nccl is not None else self.transport.paths_taken()

    def _reduce(self, flat, key: str, index: int):
        if self.nccl is not None:
            return self.nccl(flat)
        return self.codec.reduce(flat, key, index)

    def _dense_allreduce(self, transport, array, name: str):
        spec = self.replica_spec
        # The packed bucket is this step's own buffer: reduce into it, no copy.
        return allreduce(transport, array, name, spec.algorithm, spec.groups, inplace=True)

    def _apply(self, step: int, averaged: dict) -> None:
        feeds = {gradient_name(name): averaged[name] for name in self.names}
        feeds[LEARNING_RATE] = self.learning_rate(step)
        self.update.run(feeds, self.state, self.xp, ledger=self.ledger)

    def _central_update(
        self, step: int, gradients: dict, start: float, computed: float
    ) -> tuple[list[PhaseEvent], bool]:
        """CentralStorage: gradients go to the storage device (rank 0), which updates the only
        real copy of the variables and sends the new values back to every replica. Returns the
        step's events and whether its update applied."""
        transport, central = self.transport, self.spec.rank == 0
        sent, received = transport.bytes_sent, transport.bytes_received
        if self.push_encoder is None:
            averaged = {}
            for index, bucket in enumerate(self.buckets):
                packed = bucket.pack(gradients, self.xp)
                self.memory.hold("communication", packed)
                self._simulate_overflow(step, packed)  # --precision mixed-*'s skip, watched
                total = reduce(transport, packed, f"s{step}/g{index}")
                if central:
                    total *= self.scale
                    averaged.update(bucket.unpack(total))
        else:
            averaged = self._compressed_push(step, gradients)
        pushed = self.clock()
        pushed_bytes = (transport.bytes_sent - sent, transport.bytes_received - received)
        applied = True
        if central:
            applied = self._scaler_accepts(list(averaged.values()))
            if applied:
                self._apply(step, averaged)
        updated = self.clock()
        sent, received = transport.bytes_sent, transport.bytes_received
        if self.scaler is not None:
            applied = self._share_scaler_outcome(step, applied)
        for index, bucket in enumerate(self.buckets):
            values = (
                bucket.pack(self.state, self.xp)
                if central
                else self.xp.empty(bucket.size, self.dtype)
            )
            self.memory.hold("communication", values)
            fresh = broadcast(transport, values, f"s{step}/v{index}")
            if not central:
                for name, value in bucket.unpack(fresh).items():
                    self.state[name][...] = value
                    refresh_compute_copy(self.state, name)
        pulled = self.clock()
        return [
            PhaseEvent(self.device, Phase.COMPUTE, step, start, computed),
            PhaseEvent(
                self.device, Phase.PS_PUSH, step, computed, pushed, *pushed_bytes, self.path
            ),
            PhaseEvent(self.device, Phase.UPDATE if central else Phase.IDLE, step, pushed, updated),
            PhaseEvent(
                self.device,
                Phase.PS_PULL,
                step,
                updated,
                pulled,
                transport.bytes_sent - sent,
                transport.bytes_received - received,
                self.path,
            ),
        ], applied

    def _compressed_push(self, step: int, gradients: dict) -> dict:
        """Every replica encodes each gradient (error feedback and all) and pushes it to rank
        0, which decodes them and sums in rank order; rank 0's own goes through the codec too,
        so every replica's gradient is treated alike. Returns the averages on rank 0."""
        scale = self.scaler.scale if self.scaler is not None else 1.0
        averaged = {}
        for name in self.names:
            gradient = gradients[name]
            self._simulate_overflow(step, gradient)
            payload = self.push_encoder.encode(name, gradient, scale=scale)
            key = f"s{step}/g/{name}"
            if self.spec.rank != 0:
                send_payload(self.transport, 0, key, payload)
                continue
            total = self.xp.array(decode(payload), dtype=self.dtype)  # a copy: summed into
            for peer in range(1, self.spec.replicas):
                total += decode(receive_payload(self.transport, peer, key, payload))
            total *= self.scale
            averaged[name] = total
        return averaged

    def _share_scaler_outcome(self, step: int, applied: bool) -> bool:
        """Rank 0 alone saw the sum; it tells the replicas whether the step applied (one byte
        each), so that every replica's loss scaler moves alike."""
        flag = self.xp.asarray([1 if applied else 0], dtype=np.uint8)
        shared = broadcast(self.transport, flag, f"s{step}/applied")
        if self.spec.rank == 0:
            return applied
        return self.scaler.update(bool(shared[0]))


# --- task functions (run on the workers) --------------------------------------------------


def setup_replica(spec: ReplicaSpec) -> str:
    return keep_resident(spec.worker, Replica(spec))
