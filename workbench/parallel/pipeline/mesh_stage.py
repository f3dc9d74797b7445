"""A pipeline stage split over a device mesh's tensor-parallel ranks: which of its variables
split how, each rank's shard of the state, its update graph, the collectives its split graphs
call, and the whole variables joined again from replica 0's shards.

Each stage (each model chunk, with virtual stages) is split on its own, by
``tensor_plan(model, tp, layers)``: Megatron's column-then-row pairs inside the chunk, so that
what a stage hands the next is whole on every tensor rank (docs/guide/distributed-training.md,
"The device mesh").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from workbench.config import ConfigError
from workbench.ir import Graph, GraphBuilder
from workbench.models import Sequential
from workbench.models.layers import Activation, Dense, Embedding
from workbench.models.transformer import TransformerBlock
from workbench.optim import Optimizer, emit_updates
from workbench.parallel.collectives import Transport, allreduce
from workbench.parallel.mesh import MeshShape
from workbench.parallel.pipeline.stages import split_layers
from workbench.parallel.tensor_parallel.plan import tensor_plan
from workbench.passes import run_passes
from workbench.passes.tensor_split import (
    REPLICATED,
    ParameterSplit,
    SplitPlan,
    join_rank_shards,
    shard_of,
    shard_shape,
)
from workbench.runtime.device_arrays import DeviceArrays
from workbench.training.graphs import LEARNING_RATE, gradient_name


def stage_plans(model: Sequential, tp: int, chunks: int, flag: str = "--mesh") -> SplitPlan:
    """How every parameter splits over ``tp`` ranks when the model runs as ``chunks`` model
    chunks (stages x virtual stages), each chunk split on its own; a chunk with nothing to
    split (a lone Dense layer) runs whole on every tensor rank, as Megatron runs the layers
    outside its pairs. A :class:`~workbench.config.ConfigError` naming ``flag`` when ``tp``
    does not divide a split layer, or when no chunk splits at all."""
    plan: dict[str, ParameterSplit] = {}
    for layers in split_layers(model, chunks):
        if _splits(model, layers):
            plan.update(tensor_plan(model, tp, layers, flag=flag))
        else:
            plan.update(dict.fromkeys(model.parameter_names(layers), REPLICATED))
    if tp > 1 and all(split.axis is None for split in plan.values()):
        raise ConfigError(
            flag,
            f"no stage of the model splits over {tp} tensor-parallel ranks: tensor "
            "parallelism splits pairs of consecutive Dense layers inside a stage, transformer "
            "blocks and embeddings (use fewer stages, or tp=1)",
        )
    return plan


def _splits(model: Sequential, layers: range) -> bool:
    """Whether ``layers`` hold something :func:`tensor_plan` splits: two Dense layers with
    only activations between them, a transformer block or an embedding."""
    after_dense = False  # the layers so far end in a Dense (activations aside)
    for index in layers:
        layer = model.layers[index]
        if isinstance(layer, TransformerBlock | Embedding):
            return True
        if isinstance(layer, Dense):
            if after_dense:
                return True
            after_dense = True
        elif not isinstance(layer, Activation):
            after_dense = False
    return False


def owner(name: str, variables: Sequence[str]) -> str | None:
    """The variable a state entry belongs to: itself, or the variable whose optimizer slot
    (``<variable>/momentum``, ...) it is.

    Examples
    --------
    >>> owner("dense_0/kernel/adam_m", ["dense_0/bias", "dense_0/kernel"])
    'dense_0/kernel'
    """
    found = [v for v in variables if name == v or name.startswith(v + "/")]
    return max(found, key=len, default=None)


def _split_of(
    name: str, value_ndim: int, plan: SplitPlan, variables: Sequence[str]
) -> ParameterSplit | None:
    """The split of state entry ``name`` (a variable or a slot shaped like it), or None when
    every rank holds it whole (replicated variables, scalar slots such as Adam's step)."""
    variable = owner(name, variables)
    split = plan.get(variable) if variable is not None else None
    if split is None or split.axis is None or value_ndim <= split.axis:
        return None
    return split


def shard_shapes(
    shapes: Mapping[str, tuple[int, ...]], plan: SplitPlan, tp: int
) -> dict[str, tuple[int, ...]]:
    """Each variable's shape on one tensor rank (a split axis is ``tp`` times shorter)."""
    return {
        name: shard_shape(tuple(shape), plan.get(name, REPLICATED), tp)
        for name, shape in shapes.items()
    }


def shard_state(
    state: Mapping[str, Any], plan: SplitPlan, rank: int, tp: int, arrays: DeviceArrays
) -> dict[str, Any]:
    """Tensor rank ``rank``'s part of a device's whole variables and slots (freshly
    initialised or a checkpoint's): split entries cut to the rank's shard, the rest kept."""
    variables = list(plan)
    sharded = {}
    for name, value in state.items():
        split = _split_of(name, value.ndim, plan, variables)
        if split is None:
            sharded[name] = value
        else:
            piece = shard_of(arrays.to_host(value), split, rank, tp)
            sharded[name] = arrays.to_device(np.ascontiguousarray(piece))
    return sharded


def tensor_shard_update_graph(
    optimizer: Optimizer, shapes: Mapping[str, tuple[int, ...]], dtype: str
) -> Graph:
    """The optimizer step of a rank's shards (``shapes`` by variable): gradients fed as
    ``grad/<name>``, as :func:`workbench.training.graphs.build_update_graph` builds it for
    whole variables."""
    builder = GraphBuilder()
    learning_rate = builder.placeholder(LEARNING_RATE, (), dtype)
    params = {name: builder.variable(name, shape, dtype) for name, shape in shapes.items()}
    grads = [builder.placeholder(gradient_name(n), shapes[n], dtype) for n in params]
    with builder.scope("update"):
        emit_updates(optimizer, params, grads, learning_rate, [])
    graph, _ = run_passes(builder.build({}))
    return graph


class TensorCollectives:
    """The ``COLLECTIVES`` object of a split stage's graphs: each ``all_reduce`` sums over
    the tensor group (a ring over ``group``), each call logged (start, end, bytes sent, bytes
    received) for the step's allreduce phases.

    A graph's collective keys repeat in every micro-batch (and in a recomputed forward): the
    ranks of a tensor group play the same actions in the same order, so the n-th call of a
    key in a step is the same collective on each, and the count makes its messages' key
    unique."""

    def __init__(
        self, group: Transport, step: Callable[[], int], clock: Callable[[], float]
    ) -> None:
        self.group, self.step, self.clock = group, step, clock
        self.calls: list[tuple[float, float, int, int]] = []
        self._step = -1
        self._seen: Counter[str] = Counter()

    def all_reduce(self, key: str, value: Any) -> Any:
        step = self.step()
        if step != self._step:
            self._step, self._seen = step, Counter()
        self._seen[key] += 1
        start, group = self.clock(), self.group
        sent, received = group.bytes_sent, group.bytes_received
        unique = f"s{step}/{key}#{self._seen[key]}"
        total = allreduce(group, value.copy(), unique, "ring", inplace=True)
        traffic = (group.bytes_sent - sent, group.bytes_received - received)
        self.calls.append((start, self.clock(), *traffic))
        return total

    def take_calls(self) -> list[tuple[float, float, int, int]]:
        """The calls logged since the last take (the phase being closed ran them)."""
        calls, self.calls = self.calls, []
        return calls


def join_tensor_shards(
    snapshots: Sequence[dict], mesh: MeshShape, plan: SplitPlan
) -> tuple[dict, dict]:
    """(variables, optimizer slots) whole, from the snapshots of replica 0's devices in rank
    order (stage by stage, tensor ranks innermost): split entries joined over each stage's
    tensor group, the rest taken from its tensor rank 0."""
    variables = list(plan)
    joined: dict[str, dict[str, np.ndarray]] = {"parameters": {}, "optimizer_state": {}}
    for stage in range(mesh.pp):
        group = snapshots[stage * mesh.tp : (stage + 1) * mesh.tp]
        for part, whole in joined.items():
            for name, value in group[0][part].items():
                split = _split_of(name, value.ndim, plan, variables)
                if split is None:
                    whole[name] = value
                else:
                    whole[name] = join_rank_shards([g[part][name] for g in group], split)
    return joined["parameters"], joined["optimizer_state"]
