"""In-graph replication for data parallelism: ONE client graph holding every replica's tower,
placed and partitioned by the master (between-graph, the default, has each worker build its
own replica graph instead: ``replica.py``).

- **Mirrored.** Tower i reads its own mirrored copy of every variable on device i. The
  gradients are packed into the fusion buckets (``--bucket-mb``), and each bucket gets one
  ``all_reduce`` node per device (a collective instance keyed by the bucket, as TF's
  ``CollectiveReduce`` ops); each device unpacks the sum, scales it by 1/N and applies the
  same update to its copy. No edge is cut: the all-reduce is the only traffic.
- **Central storage.** The variables live on device 0 only. It is the parameter-server
  graph with device 0 as the one shard: the towers on the other devices receive the
  variables, send back their gradients, and device 0 adds them up (an add-n), scales by 1/N
  and updates. Every cut edge is a Send/Recv pair.

Every device runs its partition each step (``model_parallel/device.py``, which feeds each
tower its rows of the global batch).

With ``--accumulate K`` (mirrored) each device holds K towers, one per micro-step, fed
consecutive slices of the replica's rows (tower ``i*K + k`` is device i's micro-step k); their
gradients are summed before the buckets are packed, so each bucket is all-reduced once, and
the device's loss is the mean of its towers'.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from workbench.ir import GraphBuilder, ops
from workbench.ir.ops.communication import all_reduce
from workbench.models import Sequential
from workbench.optim import Optimizer
from workbench.parallel.collectives import plan_buckets
from workbench.parallel.model_parallel.graph import ModelParallelPlan
from workbench.parallel.parameter_server.client_graph import build_parameter_server_graph
from workbench.parallel.parameter_server.partitioner import place_variables
from workbench.parallel.towers import Tower, build_tower, tower_scope
from workbench.passes import partition, place, recompute_passes, run_passes
from workbench.training.graphs import LEARNING_RATE

TOWERS = "in-graph replication, one tower per device:"


def build_in_graph_replication(
    model: Sequential,
    optimizer: Optimizer,
    batch_size: int,
    dtype: str,
    devices: Sequence[str],
    central_storage: bool = False,
    bucket_bytes: int = 25 * 2**20,
    accumulate: int = 1,
    recompute: str = "none",
) -> ModelParallelPlan:
    """The placed and partitioned in-graph client graph for ``devices`` towers of
    ``batch_size // len(devices)`` rows each (mirrored with ``accumulate`` K: K towers per
    device of a K-th of that each; ``recompute``: the ``--recompute`` policy, applied to every
    tower by the last pass)."""
    per_tower = batch_size // len(devices)
    if central_storage:
        graph = build_parameter_server_graph(
            model,
            optimizer,
            per_tower,
            dtype,
            devices,
            devices[:1],
            place_variables(model.parameter_shapes(), 1),
            in_graph=True,
        )
        return ModelParallelPlan(graph.placed, graph.partitioned, _towers(devices), TOWERS)
    builder = GraphBuilder()
    shapes = model.parameter_shapes()
    buckets = plan_buckets(shapes, np.dtype(dtype).itemsize, bucket_bytes)
    # The sum of every replica's K micro-step means -> the global-batch mean.
    scale = np.asarray(1.0 / (len(devices) * accumulate), dtype=dtype)
    losses = {}
    for index, device in enumerate(devices):
        scope = tower_scope(index * accumulate)
        with builder.device(device), builder.scope(scope):
            reads = {name: builder.variable(name, shape, dtype) for name, shape in shapes.items()}
        towers = [
            build_tower(
                builder,
                model,
                device,
                index * accumulate + micro_step,
                lambda reads=reads: reads,
                reads,
                per_tower // accumulate,
                dtype,
            )
            for micro_step in range(accumulate)
        ]
        tower = _summed(builder, device, scope, towers, dtype)
        losses[f"{scope}/loss"] = tower.loss
        with builder.device(device), builder.scope(scope):
            learning_rate = builder.placeholder(LEARNING_RATE, (), dtype)
            with builder.scope("allreduce"):
                averaged = {}
                for number, bucket in enumerate(buckets):
                    flat = ops.concat(
                        [ops.reshape(tower.gradients[name], (-1,)) for name in bucket.names]
                    )
                    total = all_reduce(flat, key=f"bucket_{number}", group=tuple(devices))
                    for name, shape, offset in zip(bucket.names, bucket.shapes, bucket.offsets):
                        size = int(np.prod(shape))
                        piece = ops.slice_(total, (offset,), (offset + size,))
                        averaged[name] = ops.reshape(piece, shape) * builder.constant(scale)
            with builder.scope("update"):
                for name in shapes:
                    optimizer.emit_update(
                        reads[name], averaged[name], learning_rate, name, after=()
                    )
    final = recompute_passes(recompute, [layer.name for layer in model.layers])
    built, _ = run_passes(builder.build(losses), final=final)
    placed = place(built, list(devices))
    return ModelParallelPlan(
        placed, partition(placed, list(devices)), _towers(devices, accumulate), TOWERS
    )


def _summed(
    builder: GraphBuilder, device: str, scope: str, towers: list[Tower], dtype: str
) -> Tower:
    """One device's micro-step towers as one: their gradients summed (in micro-step order),
    their losses' mean; a single tower as it is."""
    if len(towers) == 1:
        return towers[0]
    with builder.device(device), builder.scope(scope), builder.scope("accumulate"):
        gradients = {}
        for name in towers[0].gradients:
            total = towers[0].gradients[name]
            for tower in towers[1:]:
                total = total + tower.gradients[name]
            gradients[name] = total
        loss = towers[0].loss
        for tower in towers[1:]:
            loss = loss + tower.loss
        loss = loss * builder.constant(np.asarray(1.0 / len(towers), dtype=dtype))
    return Tower(loss, gradients)


def _towers(devices: Sequence[str], accumulate: int = 1) -> tuple[tuple[str, str], ...]:
    return tuple(
        (tower_scope(index * accumulate + micro_step), device)
        for index, device in enumerate(devices)
        for micro_step in range(accumulate)
    )
