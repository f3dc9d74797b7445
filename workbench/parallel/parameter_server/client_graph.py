"""The parameter-server client graph, placed and partitioned by the master.

One graph holds the variables (whole, or their parts) with a device constraint to their
``/job:ps/task:k``, each shard's learning-rate feed and optimizer updates there too, and the
towers' forward and backward passes on the workers: one tower for a between-graph worker's
own graph, one per worker (``tower_<i>``) for in-graph replication, where each shard sums the
towers' gradients with an add-n and scales by 1/N itself. ``place`` resolves the constraints
and ``partition`` cuts every edge between a worker and a shard with a Send/Recv pair. Those
pairs *are* the parameter-server traffic:

- a Send from shard k to worker w of a variable read is a **pull** (the shard answers a pull
  by running its partition's sends, :meth:`ParameterServerGraph.serve_program`);
- a Send from worker w to shard k of a gradient is a **push** (the shard feeds it to its
  partition's updates, :meth:`ParameterServerGraph.apply_program`, when the sans-IO protocol
  says the update is due).

A partitioned variable is read on the worker as the concatenation of its parts; the
concatenation's gradient is a split, so each part's gradient goes to the part's shard. A
gradient that comes from an embedding lookup is *row-sparse*: only the rows a batch touched
are non-zero, and it travels as an IndexedSlices-style ``(row indices, rows)`` pair.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from workbench.ir import Graph, GraphBuilder, Tensor, ops
from workbench.models import Sequential
from workbench.optim import Optimizer
from workbench.parallel.parameter_server.partitioner import VariablePiece
from workbench.parallel.towers import build_tower, tower_scope
from workbench.passes import Partitioned, Transfer, extract, partition, place, run_passes
from workbench.training.graphs import LEARNING_RATE

# Ops whose output gradient is non-zero only in the rows a batch looked up.
_ROW_SPARSE_SOURCES = ("embedding_grad",)
_ROW_PRESERVING = ("split", "slice")


@dataclass(frozen=True)
class ParameterServerGraph:
    placed: Graph
    partitioned: Partitioned
    workers: tuple[str, ...]  # one tower each
    shards: tuple[str, ...]
    pieces: tuple[VariablePiece, ...]
    row_sparse: frozenset[str]  # transfer keys whose tensors travel as (indices, rows)

    def pulls(self, shard: int, worker: int) -> tuple[Transfer, ...]:
        """What shard ``shard`` sends worker ``worker`` (variable values), in graph order."""
        return self._between(self.shards[shard], self.workers[worker])

    def pushes(self, shard: int, worker: int) -> tuple[Transfer, ...]:
        """What worker ``worker`` sends shard ``shard`` (gradients), in graph order."""
        return self._between(self.workers[worker], self.shards[shard])

    def _between(self, source: str, target: str) -> tuple[Transfer, ...]:
        return tuple(
            t for t in self.partitioned.transfers if t.source == source and t.target == target
        )

    def worker_program(self, worker: int) -> Graph:
        return self.partitioned.partitions[self.workers[worker]]

    def serve_program(self, shard: int) -> Graph:
        """The shard's partition cut down to its sends: read the variables, send them."""
        part = self.partitioned.partitions[self.shards[shard]]
        return extract(part, [node.name for node in part.nodes if node.op == "send"])

    def apply_program(self, shard: int) -> Graph:
        """The shard's partition cut down to its updates: receive gradients, (add them up,
        for in-graph towers), apply the optimizer."""
        part = self.partitioned.partitions[self.shards[shard]]
        updates = [n.name for n in part.nodes if n.op.startswith("apply_")]
        return extract(part, updates)

    def describe(self) -> str:
        lines = ["variables on parameter-server shards:"]
        for piece in self.pieces:
            rows = f" rows {piece.rows[0]}:{piece.rows[1]}" if piece.is_part else ""
            lines.append(f"  {piece.name:<28} {self.shards[piece.shard]}{rows}")
        lines.append("partitions and Send/Recv pairs (pulls shard->worker, pushes worker->shard):")
        lines.append(self.partitioned.describe())
        if self.row_sparse:
            lines.append("row-sparse pushes (indices, rows): " + ", ".join(sorted(self.row_sparse)))
        return "\n".join(lines)


def learning_rate_feed(shard: int) -> str:
    return f"ps_{shard}/{LEARNING_RATE}"


# What an apply program holds when it is plain SGD: its variables, its learning-rate feed,
# the recvs of the pushed gradients and an update of each variable, nothing in between.
_PLAIN_SGD_OPS = frozenset({"variable", "placeholder", "recv", "apply_sgd"})


def applies_plain_sgd(program: Graph) -> bool:
    """Whether ``program`` (an :meth:`ParameterServerGraph.apply_program`) feeds each
    received gradient straight to an SGD update. Its updates are then linear in the gradient
    and in the learning rate alike: a gradient scaled by s and a learning rate scaled by s
    move the variables the same way (no slot remembers the gradient's scale, as momentum's
    and Adam's do)."""
    return {node.op for node in program.nodes} <= _PLAIN_SGD_OPS


def build_parameter_server_graph(
    model: Sequential,
    optimizer: Optimizer,
    batch_size: int,
    dtype: str,
    workers: Sequence[str],
    shards: Sequence[str],
    pieces: Sequence[VariablePiece],
    in_graph: bool = False,
) -> ParameterServerGraph:
    """The client graph for ``workers`` towers of ``batch_size`` rows each (between-graph:
    one worker, its own graph), placed on ``workers + shards`` and partitioned."""
    builder = GraphBuilder()
    reads: dict[str, Tensor] = {}
    for piece in pieces:
        with builder.device(shards[piece.shard]):
            reads[piece.name] = builder.variable(piece.name, piece.shape, dtype)
    learning_rates = []
    for shard, device in enumerate(shards):
        with builder.device(device), builder.scope(f"ps_{shard}"):
            learning_rates.append(builder.placeholder(LEARNING_RATE, (), dtype))
    towers = []
    for index, worker in enumerate(workers):
        tower = build_tower(
            builder,
            model,
            worker,
            index if in_graph else None,
            lambda: _joined_variables(model, pieces, reads),
            {piece.name: reads[piece.name] for piece in pieces},
            batch_size,
            dtype,
        )
        towers.append(tower)
    scale = np.asarray(1.0 / len(workers), dtype=dtype)
    for piece in pieces:
        with builder.device(shards[piece.shard]), builder.scope("update"):
            gradient = towers[0].gradients[piece.name]
            if in_graph:  # the add-n of the towers' gradients, on the shard
                for tower in towers[1:]:
                    gradient = gradient + tower.gradients[piece.name]
                gradient = gradient * builder.constant(scale)
            optimizer.emit_update(
                reads[piece.name], gradient, learning_rates[piece.shard], piece.name, after=()
            )
    outputs = {_loss_name(i if in_graph else None): tower.loss for i, tower in enumerate(towers)}
    graph, _ = run_passes(builder.build(outputs))
    devices = list(dict.fromkeys([*workers, *shards]))  # central storage: a worker is the shard
    placed = place(graph, devices)
    partitioned = partition(placed, devices)
    return ParameterServerGraph(
        placed,
        partitioned,
        tuple(workers),
        tuple(shards),
        tuple(pieces),
        _row_sparse(placed, partitioned, set(workers)),
    )


def _loss_name(tower: int | None) -> str:
    scope = tower_scope(tower)
    return "loss" if scope is None else f"{scope}/loss"


def _joined_variables(model: Sequential, pieces, reads) -> dict[str, Tensor]:
    """The model's variables as the tower sees them: a whole variable's read, or its parts
    concatenated along the first axis (built inside the tower, on the worker)."""
    joined = {}
    for variable in model.parameter_shapes():
        parts = [reads[p.name] for p in pieces if p.variable == variable]
        joined[variable] = parts[0] if len(parts) == 1 else ops.concat(parts, axis=0)
    return joined


def _row_sparse(graph: Graph, partitioned: Partitioned, workers: set[str]) -> frozenset[str]:
    sparse = set()
    for transfer in partitioned.transfers:
        if transfer.source not in workers:
            continue
        node = graph.node(transfer.value.node)
        while node.op in _ROW_PRESERVING:
            node = graph.node(node.inputs[0].node)
        if node.op in _ROW_SPARSE_SOURCES:
            sparse.add(transfer.key)
    return frozenset(sparse)
