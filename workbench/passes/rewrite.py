"""Shared plumbing for passes: rebuilding a graph while redirecting values."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from workbench.ir.graph import Graph, Node, Value


def redirect(node: Node, values: Mapping[Value, Value], names: Mapping[str, str]) -> Node:
    """``node`` with its inputs and control inputs pointed at their replacements."""
    inputs = tuple(values.get(value, value) for value in node.inputs)
    control = tuple(dict.fromkeys(names.get(name, name) for name in node.control_inputs))
    if inputs == node.inputs and control == node.control_inputs:
        return node
    return node.replace(inputs=inputs, control_inputs=control)


def rebuild(
    graph: Graph,
    nodes: Iterable[Node],
    values: Mapping[Value, Value],
    names: Mapping[str, str] | None = None,
) -> Graph:
    names = names or {}
    outputs = {key: values.get(value, value) for key, value in graph.outputs.items()}
    return Graph(tuple(redirect(node, values, names) for node in nodes), outputs)


def hashable(item: Any) -> Any:
    """A hashable, value-based key for attributes (arrays compare by dtype, shape and bytes)."""
    if isinstance(item, np.ndarray):
        return ("ndarray", str(item.dtype), item.shape, item.tobytes())
    if isinstance(item, Mapping):
        return tuple(sorted((key, hashable(value)) for key, value in item.items()))
    if isinstance(item, list | tuple):
        return tuple(hashable(value) for value in item)
    if isinstance(item, float) and item != item:  # NaN never equals itself
        return ("nan",)
    return item
