"""Reverse-mode differentiation as a graph-to-graph transform.

``gradients`` walks the graph backwards from a scalar, asks each op's vjp rule for the input
cotangents, sums cotangents that meet at a value, and appends every backward node to the same
graph. The result is an ordinary graph, so the backward pass can be pruned, folded, placed and
partitioned exactly like the forward pass.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from workbench.ir.builder import GraphBuilder, Tensor
from workbench.ir.graph import Graph, Value
from workbench.ir.ops.shapes import broadcast_to
from workbench.ir.rules import NOT_DIFFERENTIABLE, VJP_RULES


class DifferentiationError(ValueError):
    """The requested gradient cannot be built (non-scalar loss, non-float input, ...)."""


def _needed_nodes(graph: Graph, loss: Value, wrt: Sequence[Value]) -> set[str]:
    """Nodes on some path from a ``wrt`` value to the loss: only these need cotangents."""
    reaches_wrt: set[str] = {value.node for value in wrt}
    for node in graph.nodes:
        if any(value.node in reaches_wrt for value in node.inputs):
            reaches_wrt.add(node.name)
    feeds_loss: set[str] = {loss.node}
    for node in reversed(graph.nodes):
        if node.name in feeds_loss:
            feeds_loss.update(value.node for value in node.inputs)
    return reaches_wrt & feeds_loss


def gradients(builder: GraphBuilder, loss: Tensor, wrt: Sequence[Tensor]) -> list[Tensor]:
    """Append the backward pass of ``loss`` to ``builder``'s graph; return d loss / d wrt.

    A ``wrt`` tensor the loss does not depend on gets a zero gradient.

    Examples
    --------
    >>> from workbench.ir import GraphBuilder, ops
    >>> from workbench.ir.autodiff import gradients
    >>> b = GraphBuilder()
    >>> x = b.placeholder("x", (3,), "float64")
    >>> loss = ops.reduce_sum(x * x)
    >>> (dx,) = gradients(b, loss, [x])
    >>> dx.shape
    (3,)
    """
    if loss.shape != ():
        raise DifferentiationError(f"the loss must be a scalar, got {loss.type} ({loss.name})")
    if not loss.dtype.startswith("float"):
        raise DifferentiationError(f"the loss must be floating point, got {loss.type}")
    graph = Graph(tuple(builder.nodes))
    needed = _needed_nodes(graph, loss.value, [t.value for t in wrt])
    cotangents: dict[Value, Tensor] = {}

    def accumulate(value: Value, contribution: Tensor) -> None:
        existing = cotangents.get(value)
        cotangents[value] = contribution if existing is None else existing + contribution

    with builder.scope("gradients"):
        accumulate(loss.value, builder.constant(np.ones((), dtype=loss.dtype)))
        for node in reversed(graph.nodes):
            if node.name not in needed or not node.inputs:
                continue
            outs = [cotangents.get(Value(node.name, i)) for i in range(len(node.types))]
            if all(ct is None for ct in outs):
                continue
            rule = VJP_RULES[node.op]
            if rule is NOT_DIFFERENTIABLE:
                raise DifferentiationError(
                    f"op {node.op!r} (node {node.name!r}) is not differentiable, but the loss "
                    "depends through it on a value being differentiated"
                )
            inputs = [builder.tensor(value) for value in node.inputs]
            outputs = [builder.tensor(node.output(i)) for i in range(len(node.types))]
            with builder.scope(node.name):
                input_cotangents = rule(inputs, outputs, outs, **node.attrs)
            for value, cotangent in zip(node.inputs, input_cotangents):
                if cotangent is not None and value.node in needed:
                    accumulate(value, cotangent)

        results = []
        for tensor in wrt:
            gradient = cotangents.get(tensor.value)
            if gradient is None:
                zero = builder.constant(np.zeros((), dtype=tensor.dtype))

                gradient = broadcast_to(zero, tensor.shape)
            results.append(gradient)
    return results
