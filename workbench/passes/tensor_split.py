"""Tensor parallelism as a graph pass: one rank's share of a forward graph (Megatron-LM's
column and row splits, Shoeybi et al. 2019), written as sharding propagation.

Each value of the rank's program is *replicated* (every rank holds all of it, equal on every
rank), *split* on one axis (the rank holds the contiguous slice ``[rank*n/tp, (rank+1)*n/tp)``)
or *partial* (every rank holds a summand; the value is their sum). Variables start as their
:class:`ParameterSplit` says; each op's rule says what its inputs must be and what its output
is (docs/guide/distributed-training.md, "Tensor parallelism"):

- matmul: a split contracted axis on both sides gives a partial sum (a row split); a split
  output column (a column split), output row or batch axis stays split;
- elementwise ops (with broadcasting), transpose, softmax and reductions over axes that are
  not split keep the split; reshape keeps it when it splits or merges the split axis as the
  transformer's heads do; a sum over the split axis gives a partial sum;
- an embedding lookup in a vocabulary shard gives a partial sum (ids outside look up zeros);
- everything else (layer norm, the loss, dropout, ...) reads replicated values only.

Where a partial value meets an op that needs it whole, an ``all_reduce`` (Megatron's g) joins
it; where a replicated value enters a split op, a ``tensor_input`` (Megatron's f) marks it, and
the value is sliced when the op needs the rank's slice of it. Their gradient rules
(:mod:`workbench.ir.ops.communication`) make autodiff of the rank's program give exactly the
one-device gradient of the rank's shards and, on every rank alike, of the replicated values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from workbench.ir.graph import Graph, Node, TensorType, Value
from workbench.ir.rules import SHAPE_RULES, ShapeError, is_float, normalize_axes

Role = Literal["column", "row", "vocabulary", "replicated"]


@dataclass(frozen=True)
class ParameterSplit:
    """How one parameter is cut over the ranks: ``axis`` is the cut axis (None: replicated)."""

    role: Role
    axis: int | None


SplitPlan = Mapping[str, ParameterSplit]

REPLICATED = ParameterSplit("replicated", None)


class SplitError(ValueError):
    """What cannot be split, and why (callers name their flag: ``--tp``, ``--mesh``)."""


@dataclass(frozen=True)
class _Sharding:
    kind: Literal["replicated", "split", "partial"]
    axis: int | None = None

    def __str__(self) -> str:
        return f"split on axis {self.axis}" if self.kind == "split" else self.kind


_WHOLE = _Sharding("replicated")
_PARTIAL = _Sharding("partial")


def _split(axis: int) -> _Sharding:
    return _Sharding("split", axis)


_ELEMENTWISE = ("add", "sub", "mul", "div", "maximum", "relu_grad")
_UNARY = ("neg", "exp", "log", "sqrt", "tanh", "sigmoid", "relu", "gelu", "cast")
_SOURCES = ("placeholder", "constant")


def shard_bounds(size: int, rank: int, tp: int) -> tuple[int, int]:
    """The rank's contiguous range ``[start, end)`` of an axis of ``size``.

    Examples
    --------
    >>> shard_bounds(8, 1, 4)
    (2, 4)
    """
    if size % tp:
        raise SplitError(f"an axis of {size} does not split into {tp} equal parts")
    part = size // tp
    return rank * part, (rank + 1) * part


def shard_of(array: Any, split: ParameterSplit, rank: int, tp: int) -> Any:
    """The rank's shard of a whole parameter (the whole array when replicated).

    Examples
    --------
    >>> shard_of(np.arange(6).reshape(2, 3), ParameterSplit("row", 0), 1, 2)
    array([[3, 4, 5]])
    """
    if split.axis is None:
        return array
    start, end = shard_bounds(array.shape[split.axis], rank, tp)
    index = [slice(None)] * array.ndim
    index[split.axis] = slice(start, end)
    return array[tuple(index)]


def join_rank_shards(shards: Sequence[Any], split: ParameterSplit) -> Any:
    """The whole parameter from the ranks' shards, in rank order (a replicated parameter is
    rank 0's copy).

    Examples
    --------
    >>> whole = np.arange(12.0).reshape(3, 4)
    >>> column = ParameterSplit("column", 1)
    >>> shards = [shard_of(whole, column, rank, 2) for rank in range(2)]
    >>> bool((join_rank_shards(shards, column) == whole).all())
    True
    """
    if split.axis is None:
        return shards[0]
    return np.concatenate([np.asarray(shard) for shard in shards], axis=split.axis)


def shard_shape(shape: tuple[int, ...], split: ParameterSplit, tp: int) -> tuple[int, ...]:
    """The shape of each rank's shard of a parameter of ``shape``."""
    if split.axis is None:
        return shape
    return tuple(s // tp if i == split.axis else s for i, s in enumerate(shape))


def split_for_rank(
    graph: Graph,
    plan: SplitPlan,
    rank: int,
    tp: int,
    group: tuple[str, ...] = (),
    key_prefix: str = "tp",
) -> Graph:
    """Rank ``rank``'s SPMD program of a forward ``graph`` (placeholders, variables, forward
    ops and outputs; no autodiff yet) under ``plan`` (by variable name; absent: replicated).

    Split variables keep their names and get their shard's shape; ops on split values act on
    the shard; an ``all_reduce`` joins a partial sum where it is needed whole and a
    ``tensor_input`` marks a replicated value entering a split op (see the module
    docstring). Their collective keys are ``f"{key_prefix}/{node}"`` with ``node`` the name of
    the inserted node (``<original node>/all_reduce`` or ``<original node>/tensor_input``),
    the same on every rank; ``group`` is their group attribute. Placeholders, variables,
    outputs and every original node keep their names; outputs are replicated. Raises
    :class:`SplitError` naming the node and op that cannot take a split value.

    Examples
    --------
    >>> from workbench.ir import GraphBuilder, ops
    >>> b = GraphBuilder()
    >>> x = b.placeholder("x", (4, 8), "float64")
    >>> h = ops.relu(x @ b.variable("w1", (8, 6), "float64"))
    >>> y = h @ b.variable("w2", (6, 3), "float64")
    >>> plan = {"w1": ParameterSplit("column", 1), "w2": ParameterSplit("row", 0)}
    >>> rank1 = split_for_rank(b.build({"y": y}), plan, 1, 2)
    >>> [(n.op, n.types[0].shape) for n in rank1.nodes if n.op != "placeholder"]
    [('variable', (8, 3)), ('tensor_input', (4, 8)), ('matmul', (4, 3)), ('relu', (4, 3)), \
('variable', (3, 3)), ('matmul', (4, 3)), ('all_reduce', (4, 3))]
    """
    if tp < 1 or not 0 <= rank < tp:
        raise SplitError(f"rank {rank} is not one of the {tp} ranks")
    return _RankSplitter(graph, plan, rank, tp, tuple(group), key_prefix).run()


class _RankSplitter:
    """The state of one rank's rewrite: the new nodes, each value's sharding, the inserted
    all-reduces, entries and slices (one per value, shared by its readers)."""

    def __init__(
        self,
        graph: Graph,
        plan: SplitPlan,
        rank: int,
        tp: int,
        group: tuple[str, ...],
        key_prefix: str,
    ) -> None:
        self.graph, self.plan, self.rank, self.tp = graph, plan, rank, tp
        self.group, self.key_prefix = group, key_prefix
        self.nodes: list[Node] = []
        self.types: dict[str, tuple[TensorType, ...]] = {}
        self.sharding: dict[Value, _Sharding] = {}
        # Each value's whole type (what it is on one device); an inserted node's is its input's.
        self.whole: dict[Value, TensorType] = {
            node.output(i): t for node in graph.nodes for i, t in enumerate(node.types)
        }
        self.names = {node.name for node in graph.nodes}
        self.reduced: dict[Value, Value] = {}
        self.entered: dict[Value, Value] = {}
        self.sliced: dict[tuple[Value, int], Value] = {}
        self.current: Node | None = None

    # --- the walk -------------------------------------------------------------------------

    def run(self) -> Graph:
        for node in self.graph.nodes:
            self.current = node
            self._rewrite(node)
        outputs = {}
        for key, value in self.graph.outputs.items():
            sharding = self.sharding[value]
            if sharding.kind == "split":
                raise SplitError(
                    f"output {key!r} ({value}) is {sharding}: an output must be whole on every "
                    "rank; end the split region before it"
                )
            outputs[key] = self._reduce(value) if sharding.kind == "partial" else value
        return Graph(tuple(self.nodes), outputs)

    def _rewrite(self, node: Node) -> None:
        if node.op in _SOURCES:
            self._keep(node, node.inputs, dict(node.attrs), _WHOLE)
            return
        if node.op == "variable":
            self._variable(node)
            return
        shardings = [self.sharding[value] for value in node.inputs]
        if all(s.kind == "replicated" for s in shardings):
            self._keep(node, node.inputs, dict(node.attrs), _WHOLE)
            return
        rule = _RULES.get(node.op)
        if rule is None:
            self._whole_only(node)
            return
        rule(self, node)

    def _variable(self, node: Node) -> None:
        split = self.plan.get(node.attrs["var"], REPLICATED)
        if split.axis is None:
            self._keep(node, (), dict(node.attrs), _WHOLE)
            return
        shape = tuple(node.attrs["shape"])
        if not 0 <= split.axis < len(shape) or shape[split.axis] % self.tp:
            raise SplitError(
                f"variable {node.attrs['var']!r} of shape {shape} does not split into {self.tp} "
                f"equal parts on axis {split.axis}"
            )
        local = shard_shape(shape, split, self.tp)
        self._keep(node, (), {**node.attrs, "shape": local}, _split(split.axis))

    # --- emitting -------------------------------------------------------------------------

    def _keep(
        self,
        node: Node,
        inputs: Sequence[Value],
        attrs: dict[str, Any],
        sharding: _Sharding,
    ) -> None:
        """Emit ``node`` (its own name) on the rank's inputs, with output ``sharding``."""
        types = self._types_of(node, inputs, attrs)
        self._add(node.replace(inputs=tuple(inputs), attrs=attrs, types=types))
        for index in range(len(types)):
            self.sharding[Value(node.name, index)] = sharding

    def _types_of(
        self, node: Node, inputs: Sequence[Value], attrs: dict[str, Any]
    ) -> tuple[TensorType, ...]:
        if not inputs and node.op in (*_SOURCES, "variable"):
            return SHAPE_RULES[node.op]((), **attrs)
        local = tuple(self.types[value.node][value.index] for value in inputs)
        try:
            return SHAPE_RULES[node.op](local, **attrs)
        except ShapeError as error:
            raise SplitError(
                f"node {node.name!r} ({node.op}) on the rank's shards: {error}"
            ) from None

    def _add(self, node: Node) -> None:
        self.nodes.append(node)
        self.types[node.name] = node.types

    def _fresh(self, base: str) -> str:
        name, count = base, 1
        while name in self.names:
            name, count = f"{base}_{count}", count + 1
        self.names.add(name)
        return name

    def _inserted(self, op: str, source: Value, suffix: str, attrs: dict[str, Any]) -> Value:
        """A new node ``op`` reading ``source``, named after the value it reads."""
        where = source.node if source.index == 0 else f"{source.node}_{source.index}"
        name = self._fresh(f"{where}/{suffix}")
        if op in ("all_reduce", "tensor_input"):
            attrs = {"key": f"{self.key_prefix}/{name}", "group": self.group, **attrs}
        local = (self.types[source.node][source.index],)
        types = SHAPE_RULES[op](local, **attrs)
        device = self.graph.node(source.node).device if self.graph.has_node(source.node) else None
        self._add(Node(name, op, (source,), attrs, types, device=device))
        self.whole[Value(name)] = self.whole[source]
        return Value(name)

    # --- conversions ----------------------------------------------------------------------

    def _reduce(self, value: Value) -> Value:
        """The whole value of a partial sum: its all-reduce (one per value)."""
        if value not in self.reduced:
            total = self._inserted("all_reduce", value, "all_reduce", {})
            self.reduced[value] = total
            self.sharding[total] = _WHOLE
        return self.reduced[value]

    def _whole(self, value: Value) -> Value:
        """``value`` as a replicated value for an op that reads it whole."""
        sharding = self.sharding[value]
        if sharding.kind == "partial":
            return self._reduce(value)
        if sharding.kind == "split":
            node = self.current
            assert node is not None
            raise SplitError(
                f"node {node.name!r} ({node.op}) reads {value}, which is {sharding} over the "
                f"ranks; {node.op} cannot run on a shard. Split only layers whose ops a split "
                "passes through (matmul, elementwise, reshape by heads, softmax)"
            )
        return value

    def _enter(self, value: Value) -> Value:
        """A replicated value read by a split op: its ``tensor_input`` (one per value), so its
        gradient is summed over the ranks; constants and integers need none."""
        value = self._whole(value)
        producer = self.graph.node(value.node) if self.graph.has_node(value.node) else None
        kind = self.types[value.node][value.index]
        if (producer is not None and producer.op == "constant") or not is_float(kind.dtype):
            return value
        if value not in self.entered:
            entered = self._inserted("tensor_input", value, "tensor_input", {})
            self.entered[value] = entered
            self.sharding[entered] = _WHOLE
        return self.entered[value]

    def _slice(self, value: Value, axis: int) -> Value:
        """The rank's slice on ``axis`` of a replicated value entering a split op."""
        entered = self._enter(value)
        if (entered, axis) not in self.sliced:
            shape = self.types[entered.node][entered.index].shape
            start, end = shard_bounds(shape[axis], self.rank, self.tp)
            begin = tuple(start if i == axis else 0 for i in range(len(shape)))
            stop = tuple(end if i == axis else s for i, s in enumerate(shape))
            piece = self._inserted("slice", entered, f"shard_{axis}", {"begin": begin, "end": stop})
            self.sliced[(entered, axis)] = piece
            self.sharding[piece] = _split(axis)
        return self.sliced[(entered, axis)]

    def _as_split(self, value: Value, axis: int, broadcast: bool = False) -> Value:
        """``value`` split on ``axis`` (a replicated value entered, and sliced unless it is
        broadcast along that axis)."""
        sharding = self.sharding[value]
        if sharding.kind == "split":
            if sharding.axis != axis:
                node = self.current
                assert node is not None
                raise SplitError(
                    f"node {node.name!r} ({node.op}) reads {value} split on axis "
                    f"{sharding.axis} where its other inputs need axis {axis}"
                )
            return value
        if broadcast:
            return self._enter(value)
        return self._slice(value, axis)

    def _whole_only(self, node: Node) -> None:
        if node.op == "dropout" and any(
            self.sharding[value].kind == "split" for value in node.inputs
        ):
            raise SplitError(
                f"node {node.name!r} (dropout) reads a split value: dropout inside a split "
                "region would draw each rank's mask from the whole shape; leave dropout out of "
                "the split layers"
            )
        inputs = [self._whole(value) for value in node.inputs]
        self._keep(node, inputs, dict(node.attrs), _WHOLE)

    # --- rules ----------------------------------------------------------------------------

    def _reduce_partials(self, node: Node) -> list[Value]:
        return [self._reduce(v) if self.sharding[v].kind == "partial" else v for v in node.inputs]

    def elementwise(self, node: Node) -> None:
        inputs = self._reduce_partials(node)
        out = node.types[0].shape
        axes = set()
        for value in inputs:
            sharding = self.sharding[value]
            if sharding.kind == "split":
                assert sharding.axis is not None
                axes.add(sharding.axis + len(out) - len(self.whole[value].shape))
        if not axes:
            self._keep(node, inputs, dict(node.attrs), _WHOLE)
            return
        if len(axes) > 1:
            raise SplitError(f"node {node.name!r} ({node.op}) reads values split on different axes")
        (axis,) = axes
        local = []
        for value in inputs:
            shape = self.whole[value].shape
            own = axis - (len(out) - len(shape))
            broadcast = own < 0 or shape[own] == 1
            local.append(self._as_split(value, own, broadcast) if own >= 0 else self._enter(value))
        self._keep(node, local, dict(node.attrs), _split(axis))

    def unary(self, node: Node) -> None:
        (value,) = self._reduce_partials(node)
        self._keep(node, [value], dict(node.attrs), self.sharding[value])

    def matmul(self, node: Node) -> None:
        a, b = self._reduce_partials(node)
        na, nb = (len(self.graph.type_of(value).shape) for value in node.inputs)
        kinds = set()
        for position, value in enumerate((a, b)):
            sharding = self.sharding[value]
            if sharding.kind != "split":
                continue
            axis = sharding.axis
            assert axis is not None
            if position == 0:
                kinds.add("k" if axis == na - 1 else "m" if axis == na - 2 else f"batch{axis}")
            else:
                kinds.add("k" if axis == nb - 2 else "n" if axis == nb - 1 else f"batch{axis}")
        if len(kinds) != 1:
            raise SplitError(
                f"node {node.name!r} (matmul) reads operands split on axes that do not meet "
                f"({', '.join(sorted(kinds))})"
            )
        (kind,) = kinds
        out_rank = len(node.types[0].shape)
        if kind == "k":
            inputs = [self._as_split(a, na - 1), self._as_split(b, nb - 2)]
            self._keep(node, inputs, dict(node.attrs), _PARTIAL)
        elif kind == "n":
            self._keep(node, [self._enter(a), b], dict(node.attrs), _split(out_rank - 1))
        elif kind == "m":
            self._keep(node, [a, self._enter(b)], dict(node.attrs), _split(out_rank - 2))
        else:
            axis = int(kind[len("batch") :])
            a_local = self._as_split(a, axis)
            b_local = self._as_split(b, axis) if nb > 2 else self._enter(b)
            self._keep(node, [a_local, b_local], dict(node.attrs), _split(axis))

    def reshape(self, node: Node) -> None:
        (value,) = self._reduce_partials(node)
        sharding = self.sharding[value]
        if sharding.kind != "split":
            self._keep(node, [value], dict(node.attrs), sharding)
            return
        assert sharding.axis is not None
        before = self.graph.type_of(node.inputs[0]).shape
        after = node.types[0].shape
        axis = _reshaped_axis(before, after, sharding.axis, self.tp)
        if axis is None:
            raise SplitError(
                f"node {node.name!r} (reshape) takes {before} to {after}, which moves the split "
                f"axis {sharding.axis} across others: only splitting it (outer part split) or "
                "merging it with the axes after it keeps a rank's slice contiguous"
            )
        local = tuple(s // self.tp if i == axis else s for i, s in enumerate(after))
        self._keep(node, [value], {**node.attrs, "shape": local}, _split(axis))

    def transpose(self, node: Node) -> None:
        (value,) = self._reduce_partials(node)
        sharding = self.sharding[value]
        perm = tuple(node.attrs["perm"])
        moved = sharding if sharding.kind != "split" else _split(perm.index(sharding.axis))
        self._keep(node, [value], dict(node.attrs), moved)

    def softmax(self, node: Node) -> None:
        (value,) = self._reduce_partials(node)
        sharding = self.sharding[value]
        rank = len(node.types[0].shape)
        if sharding.kind == "split" and sharding.axis == node.attrs["axis"] % rank:
            self._whole(value)  # raises: a softmax over the split axis needs every part
        self._keep(node, [value], dict(node.attrs), sharding)

    def reduction(self, node: Node) -> None:
        (value,) = self._reduce_partials(node)
        sharding = self.sharding[value]
        if sharding.kind != "split":
            self._keep(node, [value], dict(node.attrs), sharding)
            return
        assert sharding.axis is not None
        rank = len(self.graph.type_of(node.inputs[0]).shape)
        axes = normalize_axes(node.op, node.attrs["axes"], rank)
        if sharding.axis in axes:
            if node.op != "sum":
                self._whole(value)  # raises: a mean or max over the split axis needs all of it
            self._keep(node, [value], dict(node.attrs), _PARTIAL)
            return
        kept = sharding.axis
        if not node.attrs["keepdims"]:
            kept -= sum(1 for axis in axes if axis < sharding.axis)
        self._keep(node, [value], dict(node.attrs), _split(kept))

    def embedding(self, node: Node) -> None:
        ids, table = node.inputs
        sharding = self.sharding[table]
        if self.sharding[ids].kind != "replicated" or sharding != _split(0):
            raise SplitError(
                f"node {node.name!r} (embedding) reads ids {self.sharding[ids]} and a table "
                f"{sharding}: only a table split by vocabulary (axis 0) looks up whole ids"
            )
        vocabulary = self.graph.type_of(table).shape[0]
        start, _ = shard_bounds(vocabulary, self.rank, self.tp)
        self._keep(node, [ids, table], {**node.attrs, "start": start}, _PARTIAL)


def _reshaped_axis(
    before: tuple[int, ...], after: tuple[int, ...], axis: int, tp: int
) -> int | None:
    """Where a reshape from ``before`` to ``after`` puts split ``axis``, if a rank's slice
    stays one contiguous slice of one output axis: the axis kept, split into several (the
    split falls on the outermost, which ``tp`` divides) or merged with the axes after it.

    Examples
    --------
    >>> _reshaped_axis((2, 5, 8), (2, 5, 4, 2), 2, 2)  # (batch, tokens, width) -> heads
    2
    >>> _reshaped_axis((2, 5, 4, 2), (2, 5, 8), 2, 2)  # heads merged back
    2
    >>> _reshaped_axis((2, 5, 8), (2, 40), 2, 2) is None  # the split axis is not the outer one
    True
    """
    prefix = int(np.prod(before[:axis], dtype=np.int64))
    for out_axis in range(len(after) + 1):
        if int(np.prod(after[:out_axis], dtype=np.int64)) != prefix:
            continue
        if out_axis == len(after):
            return None
        # Merged with the axes after it: the rank's slice of ``axis`` times the inner ones.
        inner = 1
        for end in range(axis + 1, len(before) + 1):
            inner = int(np.prod(before[axis:end], dtype=np.int64))
            if inner == after[out_axis]:
                return out_axis
            if inner > after[out_axis]:
                break
        # Split into several: the outer part is split.
        size = 1
        for end in range(out_axis + 1, len(after) + 1):
            size = int(np.prod(after[out_axis:end], dtype=np.int64))
            if size == before[axis]:
                return out_axis if after[out_axis] % tp == 0 else None
            if size > before[axis]:
                break
    return None


_RULES = {
    **{op: _RankSplitter.elementwise for op in _ELEMENTWISE},
    **{op: _RankSplitter.unary for op in _UNARY},
    "matmul": _RankSplitter.matmul,
    "reshape": _RankSplitter.reshape,
    "transpose": _RankSplitter.transpose,
    "softmax": _RankSplitter.softmax,
    "sum": _RankSplitter.reduction,
    "mean": _RankSplitter.reduction,
    "max": _RankSplitter.reduction,
    "embedding": _RankSplitter.embedding,
}
