"""A pipeline stage on a Dask worker: its model chunks' variables, its schedule, its neighbours.

A device holds one model chunk per virtual stage (one, except with interleaved-1f1b): its local
chunk ``c`` is model chunk ``k = c * P + s`` (``stages.py``). Each step the device plays its
action list: a forward of chunk ``k`` takes the micro-batch from the data (model chunk 0) or
from the device of chunk ``k - 1``, and sends its activation on to the device of chunk
``k + 1`` (the loss, on the last model chunk); a backward takes the gradient from the device of
chunk ``k + 1`` (or the loss), with the forward values it kept for that chunk and micro-batch
(what ``--recompute`` does not recompute), and sends the input gradient back. Zero-bubble
splits a backward: ``I`` computes the input gradient and sends it back at once, keeping what
``W`` reads; ``W`` computes the parameter gradients when its action comes. Parameter gradients
are summed over micro-batches and averaged into one optimizer update per step. Activations
arriving from a neighbour land in this worker's mailbox while it computes, so transfers overlap
compute.

On a device mesh (``--strategy mesh``; pipeline and hybrid are meshes with one tensor rank) the
devices of a chunk's neighbours are those of the same replica and tensor rank; with tp > 1 each
chunk's graphs are this tensor rank's split of it (``mesh_stage.py``), whose all-reduces run
over the tensor group; gradients are averaged over the data group (the same stage and tensor
rank of every replica).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from workbench.data import GlobalBatchSampler, microbatch_rows, shard_rows
from workbench.events.records import Phase, PhaseEvent, StepReport
from workbench.ir import Executable, Graph
from workbench.ir.memory import MemoryLedger
from workbench.ir.ops.communication import COLLECTIVES
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
from workbench.parallel.mesh import MeshPoint, MeshShape
from workbench.parallel.pipeline.mesh_stage import (
    TensorCollectives,
    shard_shapes,
    shard_state,
    stage_plans,
    tensor_shard_update_graph,
)
from workbench.parallel.pipeline.schedules import (
    BACKWARD,
    FORWARD,
    INPUT_GRAD,
    WEIGHT_GRAD,
    StageAction,
    make_schedule,
)
from workbench.parallel.pipeline.stages import (
    ACTIVATION,
    INPUT_GRADIENT,
    OUTPUT_GRADIENT,
    STAGE_INPUT,
    StageGraphs,
    build_stage_graphs,
    chunk_layers,
    split_backward,
)
from workbench.parallel.resident_steps import ResidentProgram, keep_resident
from workbench.parallel.stop_gate import may_begin
from workbench.parallel.worker_spec import (
    WorkerSpec,
    training_data,
)
from workbench.passes.tensor_split import split_for_rank
from workbench.runtime.device_memory import is_counted
from workbench.runtime.peer_transport import SPIN_BEFORE_SLEEP_S, PeerTransport
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
    worker: WorkerSpec  # rank = (replica * stages + stage) * tp + tensor
    stall_timeout: float
    stages: int
    microbatches: int  # per replica's batch, each step
    schedule: str  # workbench.parallel.pipeline.schedules.SCHEDULE_NAMES
    # How the stage groups' all-reduces compress (hybrid's --compression; a pipeline: none).
    compression: str = "none"
    # The device mesh (mesh strategy); None: replicas x ``stages`` with no tensor split
    # (pipeline, hybrid).
    mesh: MeshShape | None = None
    # Model chunks per device (interleaved-1f1b's --virtual-stages; 1 for the other schedules).
    virtual_stages: int = 1


@dataclass(frozen=True)
class ChunkProgram:
    """One model chunk on this device, compiled: its forward, its whole backward and, when the
    schedule splits backwards, its input-gradient (``I``) and weight-gradient (``W``) halves."""

    chunk: int  # the device's local chunk index
    model_chunk: int  # its place in the model: chunk * stages + stage
    first: bool  # the model's first chunk: reads the data, has no input gradient
    last: bool  # the model's last chunk: computes the loss
    names: tuple[str, ...]
    stash: tuple[str, ...]
    forward: Executable
    backward: Executable
    # Zero-bubble's halves: ``I`` (None on the model's first chunk, whose ``W`` does the whole
    # backward) and ``W``; both None when the schedule runs whole backwards.
    input_gradient: Executable | None = None
    weight_gradient: Executable | None = None
    kept: tuple[str, ...] = ()  # what ``I`` hands ``W``
    weight_reads: frozenset[str] = frozenset()  # the feeds ``W`` reads (the rest go after ``I``)


def compile_chunk(
    graphs: StageGraphs, chunk: int, model_chunk: int, chunks: int, split: bool
) -> ChunkProgram:
    """Chunk ``chunk`` (model chunk ``model_chunk`` of ``chunks``) compiled from its graphs,
    with its backward's halves when ``split``."""
    whole = ChunkProgram(
        chunk,
        model_chunk,
        model_chunk == 0,
        model_chunk == chunks - 1,
        graphs.parameter_names,
        graphs.stash,
        Executable(graphs.forward),
        Executable(graphs.backward),
    )
    if not split:
        return whole
    halves = split_backward(graphs.backward)
    reads = frozenset(n.name for n in halves.weight_gradient.nodes if n.op == "placeholder")
    first_half = halves.input_gradient
    return replace(
        whole,
        input_gradient=None if first_half is None else Executable(first_half),
        weight_gradient=Executable(halves.weight_gradient),
        kept=halves.kept,
        weight_reads=reads,
    )


class StageWorker(ResidentProgram):
    def __init__(self, spec: StageSpec) -> None:
        self.spec, worker = spec, spec.worker
        config = self.config = worker.run_config
        # Where this device sits on the mesh: ranks are tensor-innermost,
        # rank = (replica * stages + stage) * tp + tensor (workbench/parallel/mesh.py).
        self.mesh = spec.mesh or MeshShape(len(worker.addresses) // spec.stages, 1, spec.stages)
        self.rank, self.stages = worker.rank, spec.stages
        self.replica, self.tensor, self.stage = self.mesh.point(self.rank)
        self.replicas = self.mesh.dp
        # With tp > 1 each model chunk's layers split over the tensor group (empty: none).
        self.split_plan = (
            stage_plans(worker.model, self.mesh.tp, spec.stages * spec.virtual_stages)
            if self.mesh.tp > 1
            else {}
        )
        self.first, self.last = self.stage == 0, self.stage == self.stages - 1
        self.counting = True  # whether the step under way counts its memory (run)
        dataset = worker.dataset()
        model = self.model = worker.model
        optimizer = make_optimizer(config.optimizer)
        self.sampler = GlobalBatchSampler(len(dataset.y_train), config.batch_size, config.seed)
        self.schedule = LearningRateSchedule.from_config(config, optimizer, worker.total_steps)
        self.microbatches = spec.microbatches
        self.replica_batch = config.batch_size // self.replicas
        self.microbatch = self.replica_batch // spec.microbatches
        self.actions = make_schedule(
            spec.schedule, self.stages, self.microbatches, spec.virtual_stages
        )[self.stage]
        # Zero-bubble's actions run the backward's halves: compile them too.
        split = any(action.kind in (INPUT_GRAD, WEIGHT_GRAD) for action in self.actions)
        self.chunk_count = self.stages * spec.virtual_stages
        self.chunks = [
            compile_chunk(
                self._chunk_graphs(layers, chunk * self.stages + self.stage),
                chunk,
                chunk * self.stages + self.stage,
                self.chunk_count,
                split,
            )
            for chunk, layers in enumerate(
                chunk_layers(model, self.stages, spec.virtual_stages, self.stage)
            )
        ]
        self.names = tuple(name for program in self.chunks for name in program.names)
        # This device's variables: a tensor rank's are its shards.
        shapes = shard_shapes(model.parameter_shapes(), self.split_plan, self.mesh.tp)
        self.update = Executable(
            tensor_shard_update_graph(optimizer, {n: shapes[n] for n in self.names}, config.dtype)
            if self.split_plan
            else build_update_graph(model, optimizer, config.dtype, self.names)
        )
        super().__init__(worker, optimizer, self.names)
        if self.split_plan:
            self.state = shard_state(
                self.state, self.split_plan, self.tensor, self.mesh.tp, self.arrays
            )
        self.buckets = plan_buckets(
            {n: shapes[n] for n in self.names},
            np.dtype(config.dtype).itemsize,
            DEFAULT_BUCKET_BYTES,
        )
        self.dtype = np.dtype(config.dtype).type
        if self.first or self.last:
            # The training set goes to the device once; each micro-batch gathers its rows there.
            self.inputs, self.labels = training_data(dataset, self.model, config.dtype, self.arrays)
        self.uses_dropout = model.uses_dropout  # asked of every micro-batch (a scan of layers)
        self._step_rows: tuple[int, Any] = (-1, None)  # (step, this replica's rows of it)
        # Hand-offs between two chunks of this device (a one-stage pipeline of several chunks).
        self._local: dict[str, Any] = {}
        self.transport = PeerTransport(
            worker.run_id,
            self.rank,
            worker.addresses,
            worker.device_names,
            spec.stall_timeout,
            self.arrays,
            reads_own_channels=True,  # the stage's one thread receives everything
            spin_seconds=SPIN_BEFORE_SLEEP_S,
        )
        # The same stage and tensor rank on every replica: the group that averages this
        # device's gradients.
        self.stage_group = SubgroupTransport(self.transport, self.mesh.data_group(self.rank))
        # The tensor group's all-reduces, which the split graphs' all_reduce nodes call.
        self.tensor_collectives = TensorCollectives(
            SubgroupTransport(self.transport, self.mesh.tensor_group(self.rank)),
            lambda: self.current_step,
            self.clock,
        )
        if self.split_plan:
            self.state[COLLECTIVES] = self.tensor_collectives
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

    def peer(self, stage: int) -> int:
        """The rank of ``stage`` in this device's pipeline (same replica and tensor rank)."""
        return self.mesh.rank(MeshPoint(self.replica, self.tensor, stage))

    def _chunk_graphs(self, layers: range, model_chunk: int) -> StageGraphs:
        """The graphs of model chunk ``model_chunk`` (``layers``) for this device's
        micro-batches: where every chunk's graphs are built."""
        return build_stage_graphs(
            self.model,
            layers,
            self.microbatch,
            self.config.dtype,
            model_chunk == 0,
            model_chunk == self.chunk_count - 1,
            recompute=self.config.recompute,
            forward_rewrite=self._tensor_split if self.split_plan else None,
        )

    def _tensor_split(self, graph: Graph) -> Graph:
        """This tensor rank's program of a chunk's forward graph (its shards, and the
        all-reduces that join their partial sums over the tensor group)."""
        names = self.spec.worker.device_names
        group = tuple(names[rank] for rank in self.mesh.tensor_group(self.rank))
        return split_for_rank(graph, self.split_plan, self.tensor, self.mesh.tp, group)

    def clock(self) -> float:
        """Seconds since the run's origin, once this device's queued kernels have run (a GPU
        launches asynchronously: a phase ends when its work does)."""
        self.arrays.synchronize()
        return time.time() - self.spec.worker.clock_origin

    def _rows(self, step: int, microbatch: int):
        if self._step_rows[0] != step:  # every micro-batch of a step cuts the same rows
            rows = self.sampler.batch_indices(step)
            rows = rows[shard_rows(self.config.batch_size, self.replica, self.replicas)]
            self._step_rows = (step, rows)
        rows = self._step_rows[1]
        return self.xp.asarray(
            rows[microbatch_rows(self.replica_batch, microbatch, self.microbatches)]
        )

    def _feeds(self, step: int, program: ChunkProgram, microbatch: int) -> dict[str, Any]:
        """What a chunk's programs read besides its input and what it kept: the labels (the
        loss's chunk) and the dropout seed."""
        feeds = {}
        if program.last:
            feeds[LABELS] = self.labels[self._rows(step, microbatch)]
        if self.uses_dropout:
            # One stream per micro-batch, identical in the forward and the recomputation.
            feeds[DROPOUT_SEED] = dropout_seed(self.config.seed, step * 1000 + microbatch)
        return feeds

    def _phase(
        self,
        events: list[PhaseEvent],
        phase: Phase,
        step: int,
        start: float,
        sent=0,
        received=0,
        action: StageAction | None = None,
    ) -> None:
        path = self.transport.paths_taken() if sent or received else ""
        label = "" if action is None else str(action)
        end = self.clock()
        if phase == Phase.COMPUTE:
            # A tensor-split chunk's all-reduces ran inside its compute: each its own phase.
            for begin, finish, out, into in self.tensor_collectives.take_calls():
                events.append(PhaseEvent(self.device, phase, step, start, begin, action=label))
                events.append(
                    PhaseEvent(
                        self.device,
                        Phase.ALLREDUCE,
                        step,
                        begin,
                        finish,
                        out,
                        into,
                        self.transport.paths_taken(),
                    )
                )
                start = finish
        events.append(
            PhaseEvent(self.device, phase, step, start, end, sent, received, path, action=label)
        )

    def _send(
        self,
        events: list[PhaseEvent],
        step: int,
        model_chunk: int,
        key: str,
        array: Any,
        hold: bool = True,
    ) -> None:
        """Hand ``array`` to the device of ``model_chunk``, without waiting for delivery."""
        if not self._travels(model_chunk):  # one stage holding every chunk
            self._local[key] = array
            return
        start = self.clock()
        self.transport.send_async(self.peer(model_chunk % self.stages), key, array)
        if hold:
            self._hold("communication", array)  # until the flush
        self._phase(events, Phase.SEND, step, start, array.nbytes)

    def _backward(
        self,
        events: list[PhaseEvent],
        step: int,
        action: StageAction,
        program: ChunkProgram,
        feeds: dict[str, Any],
    ) -> tuple[dict[str, Any], float]:
        """Run a whole backward, sending its input gradient back the moment the program has
        computed it, before the weight gradients that follow it: the previous chunk's device
        starts its own backward while this one finishes (docs/guide/distributed-training.md,
        "Pipeline schedules"). The compute before the send is a phase of its own; returns the
        outputs and when the compute after the send began."""
        start = self.clock()
        began = [start]

        def send_input_gradient(key: str, value: Any) -> None:
            if key != INPUT_GRADIENT:
                return
            self._phase(events, Phase.COMPUTE, step, began[0], action=action)
            m, k = action.microbatch, program.model_chunk
            # Held once the run has returned, as every sent tensor is: the run holds it now.
            self._send(events, step, k - 1, f"s{step}/g{m}@{k - 1}", value, hold=False)
            began[0] = self.clock()

        with self.straggler.computing():
            out = program.backward.run(
                feeds,
                self.state,
                self.xp,
                ledger=self._counted_by(),
                on_fetch=None if program.first else send_input_gradient,
            )
        return out, began[0]

    def _counted_by(self) -> MemoryLedger | None:
        """The ledger this step's programs count their values in, if the step is counted."""
        return self.memory.ledger if self.counting else None

    def _hold(self, category: str, array: Any) -> None:
        """Count ``array`` until the step ends, if the step is counted."""
        if self.counting:
            self.memory.hold(category, array)

    def _travels(self, model_chunk: int) -> bool:
        """Whether a tensor for ``model_chunk`` leaves this device (not when this device holds
        that chunk too)."""
        return self.peer(model_chunk % self.stages) != self.rank

    def _receive(self, events: list[PhaseEvent], step: int, model_chunk: int, key: str) -> Any:
        """What the device of ``model_chunk`` handed this device under ``key``."""
        peer = self.peer(model_chunk % self.stages)
        if peer == self.rank:
            return self._local.pop(key)
        start = self.clock()
        array = self.transport.recv(peer, key)
        self._phase(events, Phase.RECV, step, start, 0, array.nbytes)
        return array

    def _summed(
        self, totals: dict[str, Any], out: dict[str, Any], names: tuple[str, ...]
    ) -> dict[str, Any]:
        """``totals`` with the gradients of ``names`` in ``out`` added (in place from the
        second micro-batch on)."""
        summed = dict(totals)
        for name in names:
            grad = out[gradient_name(name)]
            if name in summed:
                summed[name] += grad
            else:
                summed[name] = grad.copy()
                self._hold("gradients", summed[name])
        return summed

    def run(self, first: int, count: int) -> StepReport:
        events: list[PhaseEvent] = []
        losses: list[tuple[int, float | None]] = []
        transport = self.transport
        for step in range(first, first + count):
            if not may_begin(self.spec.worker.run_id, step):
                break  # the run was stopped (docs/architecture/faults.md, "Faults and stragglers")
            transport.step = self.current_step = step
            # Every step runs the same schedule on the same shapes: a sample of the steps is
            # counted, as one device's are (counting is a large share of a stage's compute,
            # and every stage's compute is on the pipeline's path).
            self.counting = is_counted(step, first)
            if self.counting:
                self.memory.begin(self.state)
            ledger = self.memory.ledger if self.counting else _UNCOUNTED
            counted_by = self._counted_by()
            # By (local chunk, micro-batch): the stage input and the forward values its backward
            # reads, from F until B (or I); then what W reads, from I until W.
            held: dict[tuple[int, int], dict[str, Any]] = {}
            waiting: dict[tuple[int, int], dict[str, Any]] = {}
            totals: dict[str, Any] = {}
            step_loss = 0.0
            for action in self.actions:
                program, m = self.chunks[action.chunk], action.microbatch
                unit, k = (action.chunk, m), program.model_chunk
                if action.kind == FORWARD:
                    if program.first:
                        stage_input = self.inputs[self._rows(step, m)]
                    else:
                        stage_input = self._receive(events, step, k - 1, f"s{step}/a{m}@{k}")
                    start = self.clock()
                    with self.straggler.computing():
                        feeds = {STAGE_INPUT: stage_input, **self._feeds(step, program, m)}
                        out = program.forward.run(feeds, self.state, self.xp, ledger=counted_by)
                    self._phase(events, Phase.COMPUTE, step, start, action=action)
                    # Kept for this micro-batch's backward: the schedule decides how many.
                    held[unit] = {STAGE_INPUT: stage_input}
                    held[unit].update((key, out[key]) for key in program.stash)
                    for value in held[unit].values():
                        ledger.hold_array("activations", value)
                    if program.last:
                        step_loss += float(out["loss"]) / self.microbatches
                    else:
                        self._send(events, step, k + 1, f"s{step}/a{m}@{k + 1}", out[ACTIVATION])
                    continue
                if action.kind == WEIGHT_GRAD:
                    kept = waiting.pop(unit)
                    assert program.weight_gradient is not None  # compiled for a split schedule
                    start = self.clock()
                    with self.straggler.computing():
                        feeds = {**self._feeds(step, program, m), **kept}
                        out = program.weight_gradient.run(
                            feeds, self.state, self.xp, ledger=counted_by
                        )
                        totals = self._summed(totals, out, program.names)
                    for value in kept.values():
                        ledger.release_array(value)
                    self._phase(events, Phase.COMPUTE, step, start, action=action)
                    continue
                # A whole backward or its input-gradient half: the gradient from the next chunk.
                kept = held.pop(unit)
                if not program.last:
                    kept[OUTPUT_GRADIENT] = self._receive(events, step, k + 1, f"s{step}/g{m}@{k}")
                    ledger.hold_array("communication", kept[OUTPUT_GRADIENT])
                feeds = {**self._feeds(step, program, m), **kept}
                if action.kind == BACKWARD:
                    out, start = self._backward(events, step, action, program, feeds)
                    totals = self._summed(totals, out, program.names)
                    for value in kept.values():
                        ledger.release_array(value)  # the stashed values are done
                    self._phase(events, Phase.COMPUTE, step, start, action=action)
                    if not program.first and self._travels(k - 1):
                        # Sent while the backward went on; held till the step ends, as any send.
                        self._hold("communication", out[INPUT_GRADIENT])
                    continue
                elif program.input_gradient is None:
                    # The model's first chunk has no input gradient: its W does the backward.
                    waiting[unit] = kept
                    continue
                else:
                    start = self.clock()
                    with self.straggler.computing():
                        out = program.input_gradient.run(
                            feeds, self.state, self.xp, ledger=counted_by
                        )
                    # W's cotangents, and the stash entries W still reads, wait for W.
                    waiting[unit] = {key: out[key] for key in program.kept}
                    for value in waiting[unit].values():
                        ledger.hold_array("activations", value)
                    for key, value in kept.items():
                        if key in program.weight_reads:
                            waiting[unit][key] = value
                        else:
                            ledger.release_array(value)
                    self._phase(events, Phase.COMPUTE, step, start, action=action)
                if not program.first:
                    self._send(events, step, k - 1, f"s{step}/g{m}@{k - 1}", out[INPUT_GRADIENT])
            transport.flush()  # every activation and gradient of this step delivered
            if self.replicas > 1:
                totals = self._average_over_replicas(step, totals, events)
            start = self.clock()  # after the all-reduce, which is its own phase
            # The mean over equal micro-batches of every replica.
            scale = self.dtype(1.0 / (self.microbatches * self.replicas))
            feeds = {gradient_name(n): totals[n] * scale for n in self.names}
            feeds[LEARNING_RATE] = self.arrays.scalar(self.dtype(self.schedule(step)))
            self.update.run(feeds, self.state, self.xp, ledger=counted_by)
            if self.counting:
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
            self._hold("communication", flat)
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


class _Uncounted:
    """The ledger of a step that is not counted: it holds and releases nothing."""

    def hold_array(self, category: str, array: Any) -> None:
        pass

    def release_array(self, array: Any) -> None:
        pass


_UNCOUNTED = _Uncounted()
