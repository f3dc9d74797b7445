"""Common-subexpression elimination: merge nodes that compute the same thing from the same inputs.

Two nodes are the same computation when they share op, (redirected) inputs, attributes, control
inputs and device. Sources with identity (placeholders, variable reads) and effectful ops are
never merged; constants merge by value.
"""

from __future__ import annotations

from workbench.ir.graph import Graph, Node, Value
from workbench.ir.rules import OPS
from workbench.passes.rewrite import hashable, redirect

_NEVER_MERGED = {"placeholder"}


def eliminate_common_subexpressions(graph: Graph) -> Graph:
    """Keep the first of every group of identical computations and redirect readers to it.

    Examples
    --------
    >>> from workbench.ir import GraphBuilder, ops
    >>> b = GraphBuilder()
    >>> x = b.placeholder("x", (2,), "float64")
    >>> graph = b.build({"y": ops.exp(x) + ops.exp(x)})
    >>> [node.name for node in eliminate_common_subexpressions(graph).nodes]
    ['x', 'exp', 'add']
    """
    seen: dict[tuple, Node] = {}
    values: dict[Value, Value] = {}
    names: dict[str, str] = {}
    nodes: list[Node] = []
    for node in graph.nodes:
        node = redirect(node, values, names)
        definition = OPS[node.op]
        if node.op in _NEVER_MERGED or definition.effectful or definition.stateful:
            nodes.append(node)
            continue
        key = (node.op, node.inputs, hashable(node.attrs), node.control_inputs, node.device)
        original = seen.get(key)
        if original is None:
            seen[key] = node
            nodes.append(node)
            continue
        names[node.name] = original.name
        for index in range(len(node.types)):
            values[node.output(index)] = original.output(index)
    outputs = {key: values.get(value, value) for key, value in graph.outputs.items()}
    return Graph(tuple(nodes), outputs)
