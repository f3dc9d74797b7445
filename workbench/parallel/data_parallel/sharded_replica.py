"""The worker side of sharded data parallelism (ZeRO; PyTorch FSDP): a replica that keeps
only its shard of what ``--zero-stage`` shards.

A step is a mirrored replica's (:mod:`workbench.parallel.data_parallel.replica`: gradients on
this replica's rows, packed into buckets as backward produces them, each bucket handed to the
communication thread while backward goes on) with the all-reduce cut in its two halves
(:mod:`workbench.parallel.collectives.ring`). Each bucket is reduce-scattered, which leaves
this rank the summed chunk it owns; the rank updates its shard of the parameters with its
shard of the optimizer state (the optimizers are elementwise, so an update over a flat shard
is the update of the parameters' elements in it); then:

- stage 1: the whole gradients stay until the update, as under mirrored; the updated shards
  are all-gathered into every rank's whole parameters;
- stage 2: the same, but a bucket's whole gradients go as soon as it is reduce-scattered
  (the interpreter hands each gradient over and drops it, ``keep_fetches=False``);
- stage 3: the parameters are kept only as shards: a bucket is all-gathered before its first
  read in forward and again in backward, and freed after its last reader
  (:mod:`workbench.parallel.data_parallel.sharded_state`); nothing is gathered after the
  update.

Every collective runs on the one communication thread, in the order the graph asks for it,
which is the same on every rank.

With ``--precision mixed-*`` (as DeepSpeed's ZeRO with fp16/bf16) a rank's shards are float32
masters and its optimizer slots float32, and the model computes with 16-bit copies: the update
rounds each updated master shard into its 16-bit shard, and the all-gathers (after the update
at stages 1 and 2, before each pass at stage 3) move the 16-bit copies, half the bytes. The
gradients leave backward as float32, already divided by the loss scale, and are
reduce-scattered in float32, as the mirrored family all-reduces them. A rank sees only its
shards of the sums, so before the loss scaler moves every rank's "my shards are finite" goes
round in one small all-reduce (N float32 flags), and every rank skips an overflowed step
alike.
"""

from __future__ import annotations

import queue
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from workbench.ir import Executable, GraphBuilder
from workbench.ir.graph import Graph
from workbench.optim import (
    Optimizer,
    compute_dtype,
    emit_updates,
    init_slots,
    without_compute_copies,
)
from workbench.parallel.collectives import plan_buckets
from workbench.parallel.collectives.ring import (
    ring_all_gather,
    ring_allreduce,
    ring_reduce_scatter,
)
from workbench.parallel.data_parallel.gathered_reads import gathered_reads, reads_per_pass
from workbench.parallel.data_parallel.replica import Replica, ReplicaSpec
from workbench.parallel.data_parallel.sharded_state import ShardedState, device_shards
from workbench.parallel.data_parallel.shards import ShardLayout, shard_name, shard_values
from workbench.parallel.mixed_precision import all_finite
from workbench.parallel.resident_steps import keep_resident
from workbench.passes import run_passes
from workbench.training.graphs import LEARNING_RATE, gradient_name


@dataclass(frozen=True)
class ShardedReplicaSpec(ReplicaSpec):
    zero_stage: int = 3


class ShardedReplica(Replica):
    def __init__(self, spec: ShardedReplicaSpec) -> None:
        # Read while the base classes build the resident state (``resident_state``).
        self.zero_stage, self.bucket_bytes = spec.zero_stage, spec.bucket_bytes
        super().__init__(spec)
        self.scattered: queue.SimpleQueue = queue.SimpleQueue()
        layout, rank = self.layout, self.spec.rank
        sizes = [hi - lo for lo, hi in (layout.bounds(i, rank) for i in range(len(self.buckets)))]
        # The optimizer step over this rank's shards only (the base built the whole one).
        self.update = Executable(
            shard_update_graph(
                self.optimizer, self.config.dtype, sizes, compute_dtype(self.config.precision)
            )
        )

    @property
    def sharded(self) -> ShardedState:
        """The resident state (:meth:`resident_state` made it)."""
        return cast(ShardedState, self.state)

    @property
    def layout(self) -> ShardLayout:
        return self.sharded.layout

    # --- what the device keeps ------------------------------------------------------------

    def gradient_program(self) -> tuple[tuple[str, ...], Executable]:
        names, program = super().gradient_program()
        if self.zero_stage < 3:
            return names, program
        return names, Executable(gathered_reads(program.graph))

    def resident_state(self) -> ShardedState:
        """This rank's shards (and, below stage 3, the whole parameters) on the device."""
        spec, config = self.spec, self.config
        itemsize = np.dtype(config.dtype).itemsize
        buckets = plan_buckets(self.model.parameter_shapes(), itemsize, self.bucket_bytes)
        layout = ShardLayout(tuple(buckets), spec.replicas)
        parameters = spec.initial_parameters or self.model.init_parameters(
            config.seed, config.dtype
        )
        parameters = {name: np.asarray(value) for name, value in parameters.items()}
        slots = init_slots(self.optimizer, parameters)
        if spec.initial_optimizer_state:
            slots = {name: np.asarray(spec.initial_optimizer_state[name]) for name in slots}
        host_shards, host_slots = shard_values(layout, spec.rank, parameters, slots)
        whole = parameters if self.zero_stage < 3 else None
        half = compute_dtype(config.precision)
        shards, full = device_shards(
            layout, spec.rank, self.arrays, host_shards, host_slots, whole, half
        )
        reads = reads_per_pass(self.gradients.graph) if self.zero_stage == 3 else None
        return ShardedState(
            layout, spec.rank, shards, full, self._gather, reads, mixed=half is not None
        )

    def snapshot(self) -> dict[str, dict[str, np.ndarray]]:
        """This rank's shards and their slots, on the host (the client joins the ranks'
        into the checkpoint layout: ``shards.join_shards``); the 16-bit copies follow the
        masters and are not saved."""
        shards = without_compute_copies(self.sharded)
        parameters = {shard_name(index) for index in range(len(self.layout.buckets))}
        return {
            "parameters": {n: self.arrays.to_host(shards[n]) for n in shards if n in parameters},
            "optimizer_state": {
                n: self.arrays.to_host(shards[n]) for n in shards if n not in parameters
            },
        }

    # --- the step -------------------------------------------------------------------------

    def compute(
        self, step: int, fed: tuple | None = None, on_fetch=None
    ) -> tuple[dict[str, Any], float]:
        """Stages 2 and 3: each gradient is handed to ``on_fetch`` and dropped by the
        interpreter after its last reader, so a bucket's whole gradients go once packed
        (no gradients are returned)."""
        if self.zero_stage == 1 or self.config.accumulate > 1 or on_fetch is None:
            try:
                return super().compute(step, fed, on_fetch)
            finally:
                self.sharded.end_of_step()
        self.current_step = step
        inputs, labels = self.batch(step, fed)
        losses: list[Any] = []

        def fetched(key: str, value: Any) -> None:
            self._let_go_of_scattered()
            if key == "loss":
                losses.append(value)
            else:
                on_fetch(key, value)

        try:
            with self.straggler.computing():
                self.gradients.run(
                    self.feeds(step, inputs, labels),
                    self.state,
                    self.xp,
                    on_fetch=fetched,
                    ledger=self.ledger,
                    keep_fetches=False,
                )
        finally:
            self.sharded.end_of_step()
        return {}, float(losses[0])

    def _gather(self, buffer: Any, tag: str) -> None:
        """Stage 3: all-gather a bucket's parameters on the communication thread (behind the
        reduce-scatters already queued, in the same order on every rank)."""
        key = f"s{self.transport.step}/{tag}"
        # Counted while it fills; from its first read on, the interpreter counts the views
        # it keeps (as parameters) until their last reader.
        ledger = self.ledger
        if ledger is not None:
            ledger.hold_array("parameters", buffer)
        try:
            self.communication.submit(
                ring_all_gather, self.transport, wire_view(buffer), key
            ).result()
        finally:
            if ledger is not None:
                ledger.release_array(buffer)

    def _reduce(self, flat: Any, key: str, index: int) -> Any:
        """Reduce-scatter a packed bucket; this rank's summed shard of it. Stage 1 keeps the
        whole bucket (the shard is a view of it); from stage 2 only the shard is kept."""
        reduced = ring_reduce_scatter(self.transport, flat, key, inplace=True)
        lo, hi = self.layout.bounds(index, self.spec.rank)
        if self.zero_stage == 1:
            return reduced[lo:hi]
        shard = reduced[lo:hi].copy()
        self.scattered.put(flat)  # the compute thread lets go of it (it keeps the ledger)
        return shard

    def _let_go_of_scattered(self) -> None:
        """Stop keeping the packed buckets reduce-scattered so far (stages 2 and 3): freed
        mid-backward, not at the step's end."""
        while True:
            try:
                flat = self.scattered.get_nowait()
            except queue.Empty:
                return
            self.memory.let_go(flat)

    def _finish_reductions(self, step: int, reductions: list) -> tuple[dict, bool]:
        averaged = {}
        for index, future, _ in reductions:
            shard = future.result()
            self._let_go_of_scattered()
            self.memory.hold("gradients", shard)  # a view of the packed bucket at stage 1
            shard *= self.scale  # the sum of per-replica means -> the global-batch mean
            averaged[index] = shard
        if len(averaged) != len(self.buckets):
            raise RuntimeError(
                f"step {step}: only {len(averaged)} of {len(self.buckets)} buckets were reduced"
            )
        return averaged, self._every_rank_accepts(step, list(averaged.values()))

    def _every_rank_accepts(self, step: int, shards: list) -> bool:
        """Whether the step's update applies (mixed precision): every rank's shards of the
        sums are finite. Rank r sets flag r when one of its shards holds inf or NaN; the flags'
        ring all-reduce hands every rank the same answer, so every loss scaler moves alike."""
        if self.scaler is None:
            return True
        with np.errstate(over="ignore", invalid="ignore"):
            finite = all_finite(self.xp, shards)
        flags = self.xp.zeros(self.spec.replicas, dtype=np.float32)
        flags[self.spec.rank] = 0.0 if finite else 1.0
        summed = ring_allreduce(self.transport, flags, f"s{step}/finite", inplace=True)
        return self.scaler.update(not bool(self.xp.any(summed)))

    def _apply(self, step: int, averaged: dict) -> None:
        """Update this rank's shards; below stage 3, all-gather the updated parameters."""
        feeds: dict[str, Any] = {
            gradient_name(shard_name(index)): shard for index, shard in averaged.items()
        }
        feeds[LEARNING_RATE] = self.learning_rate(step)
        self.update.run(feeds, self.sharded, self.xp, ledger=self.ledger)
        for index, flat in enumerate(self.sharded.full or ()):
            ring_all_gather(self.transport, wire_view(flat), f"s{step}/p{index}")


def wire_view(buffer: Any) -> Any:
    """``buffer`` as the transports carry it: a bfloat16 buffer (an ``ml_dtypes`` type, which
    they do not know) as the same bytes seen as uint16; an all-gather into the view fills the
    buffer."""
    return buffer.view(np.uint16) if buffer.dtype.name == "bfloat16" else buffer


def shard_update_graph(
    optimizer: Optimizer, dtype: str, sizes: list[int], half: str | None = None
) -> Graph:
    """The optimizer step over flat shards ``shard/<b>`` of ``sizes`` elements, the averaged
    gradient shards fed as ``grad/shard/<b>``; with a 16-bit ``half`` (mixed precision) each
    updated master shard is then rounded into its copy ``shard/<b>/half``."""
    builder = GraphBuilder()
    learning_rate = builder.placeholder(LEARNING_RATE, (), dtype)
    params = {
        shard_name(index): builder.variable(shard_name(index), (size,), dtype)
        for index, size in enumerate(sizes)
    }
    grads = [builder.placeholder(gradient_name(name), params[name].shape, dtype) for name in params]
    with builder.scope("update"):
        emit_updates(optimizer, params, grads, learning_rate, [], half)
    graph, _ = run_passes(builder.build({}))
    return graph


# --- task functions (run on the workers) --------------------------------------------------


def setup_sharded_replica(spec: ShardedReplicaSpec) -> str:
    return keep_resident(spec.worker, ShardedReplica(spec))
