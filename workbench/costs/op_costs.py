"""What one node costs before anything is measured: its FLOPs, the bytes it touches, and the
signature under which its measured time is stored (op, input shapes and dtypes, attributes).

A calibration times each signature once; two nodes with the same signature (the same matmul in
two towers, one layer's update on every replica) cost the same on the same device.
"""

from __future__ import annotations

import hashlib

import numpy as np

from workbench.ir.graph import Graph, Node

# Attributes that change a node's work; others (names, seeds, the slot a variable lives in)
# do not, and keeping them out lets equal work share one measurement.
_IGNORED_ATTRIBUTES = frozenset({"var", "key", "name", "value", "seed", "tensor_name"})
# Ops that update a variable in place: they read and rewrite the whole variable.
_UPDATES = ("apply_sgd", "apply_momentum", "apply_adam", "assign")


def estimate_flops(graph: Graph, node: Node) -> float:
    """Rough FLOPs of one node: exact for matmul and conv, one per output element otherwise.

    Examples
    --------
    >>> from workbench.ir import GraphBuilder, ops
    >>> b = GraphBuilder()
    >>> x = b.placeholder("x", (4, 3), "float32")
    >>> w = b.placeholder("w", (3, 5), "float32")
    >>> graph = b.build({"y": ops.matmul(x, w)})
    >>> estimate_flops(graph, graph.nodes[-1])
    120.0
    """
    inputs = [graph.type_of(value) for value in node.inputs]
    out = sum(t.size for t in node.types)
    if node.op == "matmul":
        return 2.0 * out * inputs[0].shape[-1]
    if node.op in ("conv2d", "conv2d_input_grad", "conv2d_filter_grad"):
        weights = inputs[1] if node.op != "conv2d_filter_grad" else node.types[0]
        return 2.0 * max(out, inputs[0].size) * int(np.prod(weights.shape[1:]))
    if node.op in _UPDATES:
        return float(4 * inputs[0].size)
    return float(max(out, 1))


def estimate_bytes(graph: Graph, node: Node) -> int:
    """Bytes a node reads and writes (its inputs and outputs; an update also rewrites its
    variable): what bounds it when it does little arithmetic per byte."""
    read = sum(graph.type_of(value).nbytes for value in node.inputs)
    written = sum(t.nbytes for t in node.types)
    if node.op in _UPDATES:
        written += 2 * graph.type_of(node.inputs[0]).nbytes
    return read + written


def op_signature(graph: Graph, node: Node) -> str:
    """The key a node's measured time is stored under.

    Examples
    --------
    >>> from workbench.ir import GraphBuilder, ops
    >>> b = GraphBuilder()
    >>> x = b.placeholder("x", (4, 3), "float32")
    >>> graph = b.build({"y": ops.relu(x)})
    >>> op_signature(graph, graph.nodes[-1])
    'relu(4x3:float32)'
    """
    # A source node (a variable) is known by what it makes.
    operands = [graph.type_of(value) for value in node.inputs] if node.inputs else node.types
    shapes = ",".join(f"{'x'.join(map(str, t.shape)) or 'scalar'}:{t.dtype}" for t in operands)
    attributes = ",".join(
        f"{name}={value}"
        for name, value in sorted(node.attrs.items())
        if name not in _IGNORED_ATTRIBUTES and isinstance(value, (bool, int, float, str, tuple))
    )
    return f"{node.op}({shapes})" + (f"[{attributes}]" if attributes else "")


def graph_signature(graph: Graph) -> str:
    """The key a whole graph's measured spread is stored under: its nodes' signatures, in
    order, hashed (the same model at the same batch on any device has the same one).

    Examples
    --------
    >>> from workbench.ir import GraphBuilder, ops
    >>> b = GraphBuilder()
    >>> x = b.placeholder("x", (4, 3), "float32")
    >>> len(graph_signature(b.build({"y": ops.relu(x)})))
    16
    """
    text = ";".join(op_signature(graph, node) for node in graph.nodes)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
