"""Constant folding: evaluate, once and with NumPy, every node whose inputs are all constants.

Folded results larger than ``MAX_FOLDED_BYTES`` are left as computations, as TF's folder does,
so that a cheap ``broadcast_to(0, big_shape)`` does not become a large literal in the graph.
"""

from __future__ import annotations

import numpy as np

from workbench.ir.graph import Graph, Node, TensorType, Value
from workbench.ir.rules import OPS, fold_with_numpy
from workbench.passes.rewrite import rebuild

MAX_FOLDED_BYTES = 1 << 20


def _constant_node(name: str, array: np.ndarray, device: str | None) -> Node:
    array = np.array(array, copy=True)
    array.setflags(write=False)
    return Node(
        name,
        "constant",
        (),
        {"value": array},
        (TensorType(tuple(array.shape), str(array.dtype)),),
        device=device,
    )


def fold_constants(graph: Graph) -> Graph:
    """Replace all-constant computations by their values.

    Examples
    --------
    >>> from workbench.ir import GraphBuilder, ops
    >>> b = GraphBuilder()
    >>> x = b.placeholder("x", (), "float64")
    >>> two = b.constant(1.0) + 1.0
    >>> graph = fold_constants(b.build({"y": x * two}))
    >>> [node.op for node in graph.nodes]
    ['placeholder', 'constant', 'constant', 'constant', 'mul']
    """
    constants: dict[Value, np.ndarray] = {}
    values: dict[Value, Value] = {}
    names = {node.name for node in graph.nodes}
    nodes: list[Node] = []
    for node in graph.nodes:
        inputs = [values.get(value, value) for value in node.inputs]
        if node.op == "constant":
            constants[node.output()] = node.attrs["value"]
            nodes.append(node)
            continue
        foldable = (
            node.inputs
            and not node.control_inputs
            and not OPS[node.op].effectful
            and not OPS[node.op].stateful
            and all(value in constants for value in inputs)
            and sum(t.nbytes for t in node.types) <= MAX_FOLDED_BYTES
        )
        results = (
            fold_with_numpy(node.op, [constants[v] for v in inputs], dict(node.attrs))
            if foldable
            else None
        )
        if results is None:
            nodes.append(node)
            continue
        for index, array in enumerate(results):
            name = node.name if index == 0 else _fresh(f"{node.name}_out{index}", names)
            names.add(name)
            array = np.asarray(array, dtype=node.types[index].dtype)
            folded = _constant_node(name, array, node.device)
            nodes.append(folded)
            constants[folded.output()] = folded.attrs["value"]
            values[node.output(index)] = folded.output()
    return rebuild(graph, nodes, values)


def _fresh(base: str, taken: set[str]) -> str:
    name, count = base, 1
    while name in taken:
        name, count = f"{base}_{count}", count + 1
    return name
