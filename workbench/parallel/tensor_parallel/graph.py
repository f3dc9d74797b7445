"""The tensor-parallel training graph: every rank's training program, split by
:func:`~workbench.passes.tensor_split.split_for_rank` and differentiated on its own (SPMD),
joined into one client graph with each rank's nodes pinned to its device, then placed and
partitioned as the model-parallel graph is (docs/guide/distributed-training.md, "Tensor
parallelism").

A rank's nodes are named ``tp<rank>/<node>``; the feeds (batch, labels, learning rate, dropout
seed) are shared placeholders that every device feeds itself, and the ranks' ``all_reduce``
nodes meet under the same keys through the devices' collectives. No value crosses devices
any other way, so the partition has no Send/Recv pair: each device's partition is its rank's
program.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from workbench.costs import CostModel, StaticCostModel
from workbench.ir import Graph, GraphBuilder, Node, Value, gradients, ops
from workbench.models import ApplyContext, Sequential
from workbench.optim import Optimizer, emit_updates
from workbench.parallel.model_parallel.graph import (
    FED_EVERYWHERE,
    ModelParallelPlan,
    describe_cost,
    predict_plan,
)
from workbench.parallel.tensor_parallel.plan import tensor_plan
from workbench.passes import partition, place, recompute_passes, run_passes
from workbench.passes.tensor_split import SplitPlan, split_for_rank
from workbench.training.graphs import DROPOUT_SEED, INPUTS, LABELS, LEARNING_RATE

LOSS = "loss"
# The collective keys of the rank programs start with this (the same on every rank).
KEY_PREFIX = "tp"


def rank_prefix(rank: int) -> str:
    """The scope of rank ``rank``'s nodes in the joined graph."""
    return f"tp{rank}"


def forward_graph(model: Sequential, batch_size: int, dtype: str) -> Graph:
    """One-device forward graph of a training step: the feeds, the variables (named by
    parameter), the model and the loss (output ``loss``)."""
    builder = GraphBuilder()
    input_dtype = "int64" if model.takes_integer_input else dtype
    x = builder.placeholder(INPUTS, (batch_size, *model.input_shape), input_dtype)
    seed = builder.placeholder(DROPOUT_SEED, (), "int64") if model.uses_dropout else None
    params = {
        name: builder.variable(name, shape, dtype)
        for name, shape in model.parameter_shapes().items()
    }
    logits = model.apply(x, params, ApplyContext(training=True, dropout_seed=seed))
    labels = builder.placeholder(LABELS, (batch_size,), "int64")
    return builder.build({LOSS: ops.softmax_cross_entropy(logits, labels)})


def rank_training_graph(
    model: Sequential,
    optimizer: Optimizer | None,
    forward: Graph,
    plan: SplitPlan,
    rank: int,
    tp: int,
    group: Sequence[str],
    recompute: str = "none",
) -> Graph:
    """Rank ``rank``'s training step: its split of ``forward``, autodiff of the loss with
    respect to its shards and replicated variables, and (with an ``optimizer``) their
    updates, through the graph passes. Output ``loss`` (the same on every rank)."""
    split = split_for_rank(forward, plan, rank, tp, tuple(group), KEY_PREFIX)
    builder = GraphBuilder(split)
    loss = builder.tensor(split.outputs[LOSS])
    names = list(model.parameter_shapes())
    params = {name: builder.tensor(Value(name)) for name in names}
    grads = gradients(builder, loss, list(params.values()))
    if optimizer is not None:
        learning_rate = builder.placeholder(LEARNING_RATE, (), loss.dtype)
        after = [loss.value.node, *(grad.value.node for grad in grads)]
        with builder.scope("update"):
            emit_updates(optimizer, params, grads, learning_rate, after)
        outputs = {LOSS: loss}
    else:
        outputs = {LOSS: loss, **{f"grad/{n}": g for n, g in zip(names, grads)}}
    final = recompute_passes(recompute, [layer.name for layer in model.layers])
    graph, _ = run_passes(builder.build(outputs), final=final)
    return graph


@dataclass(frozen=True)
class TensorParallelGraph:
    """The ranks' programs (``ranks``: rank r's, names unprefixed) and the plan of their
    joined graph placed and partitioned (``plan``, what ``dtrain plan`` prints)."""

    split: SplitPlan
    ranks: tuple[Graph, ...]
    plan: ModelParallelPlan


def build_tensor_parallel_graph(
    model: Sequential,
    optimizer: Optimizer,
    batch_size: int,
    dtype: str,
    devices: Sequence[str],
    cost: CostModel | None = None,
    cost_source: str | None = None,
    recompute: str = "none",
    flag: str = "--tp",
) -> TensorParallelGraph:
    """Split ``model``'s training step over ``devices`` (one rank each) and join the ranks'
    programs into one placed, partitioned graph (see the module docstring).

    Examples
    --------
    >>> from workbench.models import mlp
    >>> from workbench.optim import make_optimizer
    >>> built = build_tensor_parallel_graph(
    ...     mlp((8,), 2, (4, 4)), make_optimizer("sgd"), 4, "float64", ["/task:0", "/task:1"])
    >>> parts = built.plan.partitioned.partitions.values()
    >>> [len(part.nodes_with_op("all_reduce")) for part in parts]
    [1, 1]
    >>> built.plan.partitioned.transfers
    ()
    """
    tp = len(devices)
    cost = cost or StaticCostModel()
    split = tensor_plan(model, tp, flag=flag)
    forward = forward_graph(model, batch_size, dtype)
    ranks = tuple(
        rank_training_graph(model, optimizer, forward, split, rank, tp, devices, recompute)
        for rank in range(tp)
    )
    joined = join_rank_graphs(ranks, devices)
    placed = place(joined, devices, cost, True, FED_EVERYWHERE)
    partitioned = partition(placed, devices, FED_EVERYWHERE)
    source = cost_source or describe_cost(cost)
    layers = tuple(
        (layer.name, _layer_split(model, split, index, tp))
        for index, layer in enumerate(model.layers)
    )
    plan = ModelParallelPlan(
        placed,
        partitioned,
        layers,
        heading=f"tensor-parallel split of layers over {tp} ranks (one per device):",
        prediction=predict_plan(placed, partitioned, cost, source),
        notes=tuple(collective_lines(ranks[0])),
    )
    return TensorParallelGraph(split, ranks, plan)


def join_rank_graphs(ranks: Sequence[Graph], devices: Sequence[str]) -> Graph:
    """One graph of the ranks' programs: rank r's nodes prefixed ``tp<r>/`` and pinned to
    ``devices[r]``, the feeds shared (rank 0's), output ``loss`` rank 0's."""
    nodes: list[Node] = []
    shared: set[str] = set()
    for rank, (graph, device) in enumerate(zip(ranks, devices, strict=True)):
        prefix = rank_prefix(rank)

        def renamed(name: str, graph: Graph = graph, prefix: str = prefix) -> str:
            kept = graph.node(name).op == "placeholder" and name in FED_EVERYWHERE
            return name if kept else f"{prefix}/{name}"

        for node in graph.nodes:
            name = renamed(node.name)
            if name == node.name:
                if name not in shared:
                    shared.add(name)
                    nodes.append(node)
                continue
            nodes.append(
                node.replace(
                    name=name,
                    inputs=tuple(Value(renamed(v.node), v.index) for v in node.inputs),
                    control_inputs=tuple(renamed(c) for c in node.control_inputs),
                    device=device,
                )
            )
    first = ranks[0].outputs[LOSS]
    return Graph(tuple(nodes), {LOSS: Value(f"{rank_prefix(0)}/{first.node}", first.index)})


def collective_lines(rank_graph: Graph) -> list[str]:
    """What one rank all-reduces each step, in order: forward (joining partial sums) and
    backward (the gradients of values entering a split), with each one's bytes."""
    reduces = rank_graph.nodes_with_op("all_reduce")
    backward = [n for n in reduces if n.attrs["key"].endswith("/grad")]
    forward = [n for n in reduces if not n.attrs["key"].endswith("/grad")]
    total = sum(n.types[0].nbytes for n in reduces)
    lines = [
        f"each rank's program: {len(rank_graph.nodes)} nodes; per step {_count(forward)} "
        f"forward and {len(backward)} backward, {total:,} bytes summed over the tensor group:"
    ]
    for node in reduces:
        lines.append(f"  {node.attrs['key']}: {node.types[0]}, {node.types[0].nbytes:,} bytes")
    return lines


def _count(reduces: Sequence[Node]) -> str:
    return f"{len(reduces)} all-reduce{'' if len(reduces) == 1 else 's'}"


def _layer_split(model: Sequential, split: SplitPlan, index: int, tp: int) -> str:
    names = model.parameter_names(range(index, index + 1))
    roles = sorted({split[n].role for n in names if split[n].axis is not None})
    if not roles:
        return "replicated (whole on every rank)"
    return f"{' and '.join(roles)} split over {tp} ranks"
