"""Prune: keep only what the graph's outputs need, like the TF master's subgraph extraction.

Effectful nodes (variable updates, Send/Recv) are kept even when nothing fetches them, because
running them is the point; everything they read is kept with them.
"""

from __future__ import annotations

from workbench.ir.graph import Graph
from workbench.ir.rules import OPS


def prune(graph: Graph) -> Graph:
    """Drop every node that neither feeds an output nor an effectful node.

    Examples
    --------
    >>> from workbench.ir import GraphBuilder, ops
    >>> b = GraphBuilder()
    >>> x = b.placeholder("x", (2,), "float64")
    >>> unused = ops.exp(x)
    >>> graph = b.build({"y": ops.tanh(x)})
    >>> [node.name for node in prune(graph).nodes]
    ['x', 'tanh']
    """
    live = {value.node for value in graph.outputs.values()}
    live.update(node.name for node in graph.nodes if OPS[node.op].effectful)
    for node in reversed(graph.nodes):
        if node.name in live:
            live.update(value.node for value in node.inputs)
            live.update(node.control_inputs)
    return graph.with_nodes(node for node in graph.nodes if node.name in live)


def extract(graph: Graph, targets: list[str]) -> Graph:
    """The subgraph that running the nodes ``targets`` needs, and nothing else (not even
    other effectful nodes): how the master cuts one program out of a partition, e.g. a
    parameter-server shard's "serve a pull" sends apart from its "apply a push" updates.

    Examples
    --------
    >>> from workbench.ir import GraphBuilder, ops
    >>> b = GraphBuilder()
    >>> x = b.placeholder("x", (2,), "float64")
    >>> y, z = ops.exp(x), ops.tanh(x)
    >>> graph = b.build({"y": y, "z": z})
    >>> [node.name for node in extract(graph, ["tanh"]).nodes]
    ['x', 'tanh']
    """
    live = set(targets)
    for node in reversed(graph.nodes):
        if node.name in live:
            live.update(value.node for value in node.inputs)
            live.update(node.control_inputs)
    outputs = {key: value for key, value in graph.outputs.items() if value.node in live}
    return Graph(tuple(node for node in graph.nodes if node.name in live), outputs)
