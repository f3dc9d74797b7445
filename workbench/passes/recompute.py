"""Activation recomputation: drop chosen layers' inner activations after forward and compute
them again in backward, trading compute for memory (docs/guide/command-line.md, "Activation
recomputation").

A training graph holds its forward pass and, after it, the backward pass autodiff appended
(nodes named ``gradients/...``). The interpreter runs nodes in graph order and frees each value
after its last reader (:mod:`workbench.ir.interpreter`), so every forward value that a backward
node reads stays live from forward to backward: that is the activation memory. For each chosen
layer this pass clones the layer's forward nodes whose values backward reads, right before the
first backward node that reads one of them, and points the backward readers at the clones. The
originals are then freed during forward; the clones live only from their recomputation to their
last backward reader.

What stays (the checkpoints): a chosen layer's inputs and outputs (every value a node outside
the layer reads during forward: the previous layer's output, the loss's logits), the
variables, the constants and the feeds; what is recomputed: the values inside the layer. So
``full`` keeps one tensor per layer boundary, as per-layer activation checkpointing does in
PyTorch and Megatron-LM. A clone is the same op on the same inputs with the same attributes,
so it computes the same bits (dropout draws its mask from its seed input, the same for both).

The pass runs after the fixed point of the other passes: common-subexpression elimination
would merge each clone back into its original.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from workbench.ir.graph import Graph, Node, Value
from workbench.ir.rules import OPS
from workbench.passes.prune import prune

NONE, FULL = "none", "full"
GRADIENTS = "gradients"
RECOMPUTED = "recomputed"
# Kept by the interpreter anyway (constants) or by the device (variables), or fed.
_KEPT_OPS = ("placeholder", "constant", "variable")


class RecomputeError(ValueError):
    """A recompute policy names a layer the model does not have (the message lists them)."""


def recompute_layers(policy: str, layer_names: Sequence[str]) -> tuple[str, ...]:
    """The layers ``policy`` recomputes: ``none``, ``full`` (every layer) or a comma list of
    layer names, in the model's order.

    Examples
    --------
    >>> recompute_layers("full", ["dense_0", "dense_1"])
    ('dense_0', 'dense_1')
    >>> recompute_layers(" dense_1 ,dense_1", ["dense_0", "dense_1"])
    ('dense_1',)
    >>> recompute_layers("dense_9", ["dense_0", "dense_1"])
    Traceback (most recent call last):
    ...
    workbench.passes.recompute.RecomputeError: no layer 'dense_9' in the model; its layers: \
dense_0, dense_1 (or none, full)
    """
    text = policy.strip()
    if text == NONE:
        return ()
    if text == FULL:
        return tuple(layer_names)
    names = [part.strip() for part in text.split(",")]
    for name in names:
        if name not in layer_names:
            shown = repr(name) if name else "'' (an empty name)"
            raise RecomputeError(
                f"no layer {shown} in the model; its layers: {', '.join(layer_names)} "
                f"(or {NONE}, {FULL})"
            )
    return tuple(name for name in layer_names if name in names)


def recompute(graph: Graph, layers: Collection[str]) -> Graph:
    """``graph`` with the inner forward values of ``layers`` recomputed in backward (see the
    module docstring). Layers are matched by their scope, also inside a tower's scope
    (``tower_1/dense_0/...``); with no layers the graph is returned as it is.

    Examples
    --------
    >>> import numpy as np
    >>> from workbench.ir import GraphBuilder, gradients, ops
    >>> b = GraphBuilder()
    >>> x = b.placeholder("x", (2,), "float64")
    >>> with b.scope("layer_0"):
    ...     y = ops.tanh(ops.exp(x))
    >>> loss = ops.reduce_sum(y)
    >>> (dx,) = gradients(b, loss, [x])
    >>> rewritten = recompute(b.build({"loss": loss, "dx": dx}), ["layer_0"])
    >>> [n.name for n in rewritten.nodes if n.name.endswith("/recomputed")]
    ['gradients/layer_0/exp/recomputed']
    """
    if not layers:
        return graph
    inner = _inner_nodes(graph, frozenset(layers))
    if not inner:
        return graph
    taken = {node.name for node in graph.nodes}
    clones: dict[str, Node] = {}
    nodes: list[Node] = []

    def clone_of(name: str, scope: str) -> Node:
        """The clone of inner node ``name`` (emitted, with the clones it reads, if new)."""
        if name in clones:
            return clones[name]
        original = graph.node(name)
        inputs = tuple(_cloned(value, scope) for value in original.inputs)
        clone = original.replace(name=_fresh(f"{scope}{name}/{RECOMPUTED}", taken), inputs=inputs)
        nodes.append(clone)
        clones[name] = clone
        return clone

    def _cloned(value: Value, scope: str) -> Value:
        """``value``, or its clone's if backward recomputes it."""
        return clone_of(value.node, scope).output(value.index) if value.node in inner else value

    for node in graph.nodes:
        scope = _backward_scope(node.name)
        if scope is not None and any(value.node in inner for value in node.inputs):
            node = node.replace(inputs=tuple(_cloned(v, scope) for v in node.inputs))
        nodes.append(node)
    # The originals a backward node alone read now have no reader: drop them.
    return prune(Graph(tuple(nodes), graph.outputs))


def recompute_passes(
    policy: str, layer_names: Sequence[str]
) -> tuple[tuple[str, Callable[[Graph], Graph]], ...]:
    """What :func:`~workbench.passes.run_passes` runs once at the end (``final``) for
    ``policy`` on a model with ``layer_names``: nothing for ``none``, else the ``recompute``
    pass, so the pass report lists it with the nodes it added."""
    chosen = recompute_layers(policy, layer_names)
    if not chosen:
        return ()
    return (("recompute", lambda graph: recompute(graph, chosen)),)


def _backward_scope(name: str) -> str | None:
    """``'gradients/'`` (or ``'tower_1/gradients/'``) for a backward node's name, else None."""
    parts = name.split("/")
    if GRADIENTS not in parts[:-1]:
        return None
    return "/".join(parts[: parts.index(GRADIENTS) + 1]) + "/"


def _layer_scope(name: str, layers: frozenset[str]) -> str | None:
    """The scope of the chosen layer a forward node belongs to (``dense_0`` or
    ``tower_1/dense_0``), or None."""
    parts = name.split("/")[:-1]
    for index, part in enumerate(parts):
        if part in layers:
            return "/".join(parts[: index + 1])
    return None


def _inner_nodes(graph: Graph, layers: frozenset[str]) -> frozenset[str]:
    """The forward nodes of ``layers`` whose values backward reads (directly or through
    another such node) and that no node outside their layer reads in forward."""
    scope_of: dict[str, str] = {}
    for node in graph.nodes:
        definition = OPS[node.op]
        if node.op in _KEPT_OPS or definition.effectful or definition.stateful:
            continue
        if _backward_scope(node.name) is not None:
            continue
        scope = _layer_scope(node.name, layers)
        if scope is not None:
            scope_of[node.name] = scope
    read_outside = {value.node for value in graph.outputs.values()}
    read_in_backward: set[str] = set()
    for node in graph.nodes:
        backward = _backward_scope(node.name) is not None
        for value in node.inputs:
            if value.node not in scope_of:
                continue
            if backward:
                read_in_backward.add(value.node)
            elif scope_of.get(node.name) != scope_of[value.node]:
                read_outside.add(value.node)
    candidates = {name for name in scope_of if name not in read_outside}
    # A value backward reads, and every candidate its recomputation needs.
    needed: set[str] = set()
    pending = [name for name in read_in_backward if name in candidates]
    while pending:
        name = pending.pop()
        if name in needed:
            continue
        needed.add(name)
        pending += [v.node for v in graph.node(name).inputs if v.node in candidates]
    return frozenset(needed)


def _fresh(name: str, taken: set[str]) -> str:
    fresh, count = name, 1
    while fresh in taken:
        fresh, count = f"{name}_{count}", count + 1
    taken.add(fresh)
    return fresh
