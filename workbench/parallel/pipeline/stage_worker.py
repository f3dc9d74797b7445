"""A pipeline stage on a Dask worker: its layers' variables, its schedule, its neighbours.

Each step the stage plays its action list: a forward takes the micro-batch from the data (first
stage) or from the previous stage's mailbox, and sends its activation on; a backward takes the
gradient from the next stage (or the loss, on the last), with the forward values it kept for
that micro-batch (what ``--recompute`` does not recompute: ``stages.py``), and sends the
input gradient back. Parameter gradients are summed over micro-batches and averaged into one
optimizer update per step. Activations arriving from a neighbour land in this worker's mailbox
while it computes, so transfers overlap compute.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.data import GlobalBatchSampler, microbatch_rows, shard_rows
from workbench.events.records import Phase, PhaseEvent, StepReport
from workbench.ir import Executable
from workbench.optim import LearningRateSchedule, make_optimizer
from workbench.parallel.collectives import (
    DEFAULT_BUCKET_BYTES,
    SubgroupTransport,
    allreduce,
    plan_buckets,
)
from workbench.parallel.collectives.compression import (
    bucket_codec,
    dense_allreduce_bytes,
    parse_compression,
)
from workbench.parallel.pipeline.schedules import FORWARD, make_schedule
from workbench.parallel.pipeline.stages import (
    ACTIVATION,
    INPUT_GRADIENT,
    OUTPUT_GRADIENT,
    STAGE_INPUT,
    build_stage_graphs,
    split_layers,
)
from workbench.parallel.resident_steps import ResidentProgram, keep_resident
from workbench.parallel.stop_gate import may_begin
from workbench.parallel.worker_spec import (
    WorkerSpec,
    training_data,
)
from workbench.runtime.peer_transport import PeerTransport
from workbench.training.graphs import (
    DROPOUT_SEED,
    LABELS,
    LEARNING_RATE,
    build_update_graph,
    gradient_name,
)
from workbench.training.session import dropout_seed


@dataclass(frozen=True)
class StageSpec:
    worker: WorkerSpec  # rank = replica * stages + stage
    stall_timeout: float
    stages: int
    microbatches: int  # per replica's batch, each step
    schedule: str  # workbench.parallel.pipeline.schedules.SCHEDULE_NAMES
    # How the stage groups' all-reduces compress (hybrid's --compression; a pipeline: none).
    compression: str = "none"


class StageWorker(ResidentProgram):
    def __init__(self, spec: StageSpec) -> None:
        self.spec, worker = spec, spec.worker
        config = self.config = worker.run_config
        # Ranks are replica-major: rank = replica * stages + stage (a 2-D device mesh).
        self.rank, self.stages = worker.rank, spec.stages
        self.stage, self.replica = self.rank % self.stages, self.rank // self.stages
        self.replicas = len(worker.addresses) // self.stages
        self.first, self.last = self.stage == 0, self.stage == self.stages - 1
        dataset = worker.dataset()
        model = self.model = worker.model
        optimizer = make_optimizer(config.optimizer)
        self.sampler = GlobalBatchSampler(len(dataset.y_train), config.batch_size, config.seed)
        self.schedule = LearningRateSchedule.from_config(config, optimizer, worker.total_steps)
        self.microbatches = spec.microbatches
        self.replica_batch = config.batch_size // self.replicas
        self.microbatch = self.replica_batch // spec.microbatches
        layers = split_layers(model, self.stages)[self.stage]
        graphs = build_stage_graphs(
            model,
            layers,
            self.microbatch,
            config.dtype,
            self.first,
            self.last,
            recompute=config.recompute,
        )
        self.names, self.stash = graphs.parameter_names, graphs.stash
        self.forward, self.backward = Executable(graphs.forward), Executable(graphs.backward)
        self.update = Executable(build_update_graph(model, optimizer, config.dtype, self.names))
        super().__init__(worker, optimizer, self.names)
        shapes = model.parameter_shapes()
        self.buckets = plan_buckets(
            {n: shapes[n] for n in self.names},
            np.dtype(config.dtype).itemsize,
            DEFAULT_BUCKET_BYTES,
        )
        self.actions = make_schedule(spec.schedule, self.stages, self.microbatches)[self.stage]
        self.dtype = np.dtype(config.dtype).type
        if self.first or self.last:
            # The training set goes to the device once; each micro-batch gathers its rows there.
            self.inputs, self.labels = training_data(dataset, self.model, config.dtype, self.arrays)
        self.transport = PeerTransport(
            worker.run_id,
            self.rank,
            worker.addresses,
            worker.device_names,
            spec.stall_timeout,
            self.arrays,
        )
        # The same stage on every replica: the group that averages this stage's gradients.
        self.stage_group = SubgroupTransport(
            self.transport, [r * self.stages + self.stage for r in range(self.replicas)]
        )
        # Hybrid with --compression (top-k or PowerSGD): the stage group's all-reduce goes
        # through the codec, with this device's own error feedback.
        self.compression = parse_compression(spec.compression)
        self.codec = bucket_codec(
            self.compression,
            self.stage_group,
            lambda transport, array, key: allreduce(transport, array, key),
            self.buckets,
            1.0 / self.replicas,
            config.seed,
        )

    def clock(self) -> float:
        """Seconds since the run's origin, once this device's queued kernels have run (a GPU
        launches asynchronously: a phase ends when its work does)."""
        self.arrays.synchronize()
        return time.time() - self.spec.worker.clock_origin

    def _rows(self, step: int, microbatch: int):
        rows = self.sampler.batch_indices(step)
        rows = rows[shard_rows(self.config.batch_size, self.replica, self.replicas)]
        return self.xp.asarray(
            rows[microbatch_rows(self.replica_batch, microbatch, self.microbatches)]
        )

    def _feeds(self, step: int, microbatch: int, stage_input) -> dict:
        feeds = {STAGE_INPUT: stage_input}
        if self.last:
            feeds[LABELS] = self.labels[self._rows(step, microbatch)]
        if self.model.uses_dropout:
            # One stream per micro-batch, identical in the forward and the recomputation.
            feeds[DROPOUT_SEED] = dropout_seed(self.config.seed, step * 1000 + microbatch)
        return feeds

    def _phase(
        self, events: list[PhaseEvent], phase: Phase, step: int, start: float, sent=0, received=0
    ) -> None:
        path = self.transport.paths_taken() if sent or received else ""
        events.append(
            PhaseEvent(self.device, phase, step, start, self.clock(), sent, received, path)
        )

    def run(self, first: int, count: int) -> StepReport:
        events: list[PhaseEvent] = []
        losses: list[tuple[int, float | None]] = []
        transport = self.transport
        for step in range(first, first + count):
            if not may_begin(self.spec.worker.run_id, step):
                break  # the run was stopped (docs/architecture/faults.md, "Faults and stragglers")
            transport.step = self.current_step = step
            self.memory.begin(self.state)
            ledger = self.memory.ledger
            stashed: dict[int, Any] = {}
            kept: dict[int, dict[str, Any]] = {}  # forward values a micro-batch's backward reads
            totals: dict[str, Any] = {}
            step_loss = 0.0
            for action in self.actions:
                m = action.microbatch
                if action.kind == FORWARD:
                    start = self.clock()
                    if self.first:
                        stage_input = self.inputs[self._rows(step, m)]
                    else:
                        stage_input = transport.recv(self.rank - 1, f"s{step}/a{m}")
                        self._phase(events, Phase.RECV, step, start, 0, stage_input.nbytes)
                    stashed[m] = stage_input
                    # Kept for this micro-batch's backward: the schedule decides how many.
                    ledger.hold_array("activations", stage_input)
                    start = self.clock()
                    with self.straggler.computing():
                        feeds = self._feeds(step, m, stage_input)
                        out = self.forward.run(feeds, self.state, self.xp, ledger=ledger)
                    self._phase(events, Phase.COMPUTE, step, start)
                    kept[m] = {key: out[key] for key in self.stash}
                    for value in kept[m].values():
                        ledger.hold_array("activations", value)
                    if self.last:
                        step_loss += float(out["loss"]) / self.microbatches
                    else:
                        start = self.clock()
                        transport.send_async(self.rank + 1, f"s{step}/a{m}", out[ACTIVATION])
                        self.memory.hold("communication", out[ACTIVATION])  # until the flush
                        self._phase(events, Phase.SEND, step, start, out[ACTIVATION].nbytes)
                else:
                    feeds = {**self._feeds(step, m, stashed.pop(m)), **kept.pop(m)}
                    if not self.last:
                        start = self.clock()
                        feeds[OUTPUT_GRADIENT] = transport.recv(self.rank + 1, f"s{step}/g{m}")
                        self._phase(
                            events, Phase.RECV, step, start, 0, feeds[OUTPUT_GRADIENT].nbytes
                        )
                        ledger.hold_array("communication", feeds[OUTPUT_GRADIENT])
                    start = self.clock()
                    with self.straggler.computing():
                        out = self.backward.run(feeds, self.state, self.xp, ledger=ledger)
                    ledger.release_array(feeds[STAGE_INPUT])  # the stashed input is done
                    for key in self.stash:
                        ledger.release_array(feeds[key])
                    if not self.last:
                        ledger.release_array(feeds[OUTPUT_GRADIENT])
                    for name in self.names:
                        grad = out[gradient_name(name)]
                        if name in totals:
                            totals[name] += grad
                        else:
                            totals[name] = grad.copy()
                            self.memory.hold("gradients", totals[name])
                    self._phase(events, Phase.COMPUTE, step, start)
                    if not self.first:
                        start = self.clock()
                        transport.send_async(self.rank - 1, f"s{step}/g{m}", out[INPUT_GRADIENT])
                        self.memory.hold("communication", out[INPUT_GRADIENT])  # until the flush
                        self._phase(events, Phase.SEND, step, start, out[INPUT_GRADIENT].nbytes)
            transport.flush()  # every activation and gradient of this step delivered
            if self.replicas > 1:
                totals = self._average_over_replicas(step, totals, events)
            start = self.clock()  # after the all-reduce, which is its own phase
            # The mean over equal micro-batches of every replica.
            scale = self.dtype(1.0 / (self.microbatches * self.replicas))
            feeds = {gradient_name(n): totals[n] * scale for n in self.names}
            feeds[LEARNING_RATE] = self.arrays.scalar(self.dtype(self.schedule(step)))
            self.update.run(feeds, self.state, self.xp, ledger=ledger)
            self.memory.end()
            self._phase(events, Phase.UPDATE, step, start)
            losses.append((step, step_loss if self.last else None))
        report: StepReport = {"events": events, "losses": losses}
        report["scalars"] = self.memory.report(losses[-1][0]) if losses else []
        if self.compression.compresses and losses:  # what the stage all-reduces would have sent
            dense = len(losses) * self._dense_allreduce_bytes()
            report["scalars"].append(("gradient_bytes", losses[-1][0], dense, self.device))
        return report

    def _dense_allreduce_bytes(self) -> int:
        """Bytes one step's stage all-reduces send from this device uncompressed."""
        itemsize = np.dtype(self.config.dtype).itemsize
        return sum(
            dense_allreduce_bytes("ring", (), b.size, itemsize, self.replica, self.replicas)
            for b in self.buckets
        )

    def _average_over_replicas(self, step: int, totals: dict, events: list[PhaseEvent]) -> dict:
        """Hybrid: ring all-reduce this stage's gradient sums with the same stage of every
        other replica (data parallelism along the mesh's other axis)."""
        start = self.clock()
        sent, received = self.transport.bytes_sent, self.transport.bytes_received
        summed = {}
        for index, bucket in enumerate(self.buckets):
            flat = bucket.pack(totals, self.xp)
            self.memory.hold("communication", flat)
            summed.update(bucket.unpack(self.codec.reduce(flat, f"s{step}/dp{index}", index)))
        self._phase(
            events,
            Phase.ALLREDUCE,
            step,
            start,
            self.transport.bytes_sent - sent,
            self.transport.bytes_received - received,
        )
        return summed


def setup_stage(spec: StageSpec) -> str:
    return keep_resident(spec.worker, StageWorker(spec))
