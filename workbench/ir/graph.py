"""The dataflow graph: immutable nodes in topological order, named outputs.

A :class:`Graph` is a value: passes never mutate one, they build a new one. Every node knows the
types (shape and dtype) of its outputs, computed by the op's shape rule when the node was built,
so later stages (placement cost models, partitioning, memory estimates) can read sizes without
running anything.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import ml_dtypes  # noqa: F401 - registers bfloat16 with NumPy, so np.dtype("bfloat16") works
import numpy as np

DTYPES = ("float16", "bfloat16", "float32", "float64", "int32", "int64", "bool")
# The 16-bit floating-point types: mixed precision computes in one of these.
HALF_DTYPES = ("float16", "bfloat16")


@functools.cache
def _itemsize(dtype: str) -> int:
    return np.dtype(dtype).itemsize


@dataclass(frozen=True)
class TensorType:
    """Static shape and dtype of one tensor."""

    shape: tuple[int, ...]
    dtype: str

    @property
    def size(self) -> int:
        # math.prod: the planner asks this of every value of thousands of graphs.
        return int(math.prod(self.shape))

    @property
    def nbytes(self) -> int:
        return self.size * _itemsize(self.dtype)

    def __str__(self) -> str:
        return f"{self.dtype}{list(self.shape)}"


@dataclass(frozen=True)
class Value:
    """A reference to output ``index`` of the node called ``node``."""

    node: str
    index: int = 0

    def __str__(self) -> str:
        return self.node if self.index == 0 else f"{self.node}:{self.index}"


@dataclass(frozen=True, eq=False)
class Node:
    """One operation. ``attrs`` are static parameters (axes, strides, constant values...)."""

    name: str
    op: str
    inputs: tuple[Value, ...]
    attrs: Mapping[str, Any]
    types: tuple[TensorType, ...]
    control_inputs: tuple[str, ...] = ()
    device: str | None = None

    def output(self, index: int = 0) -> Value:
        return Value(self.name, index)

    def replace(self, **changes: Any) -> Node:
        fields: dict[str, Any] = {
            "name": self.name,
            "op": self.op,
            "inputs": self.inputs,
            "attrs": self.attrs,
            "types": self.types,
            "control_inputs": self.control_inputs,
            "device": self.device,
        }
        fields.update(changes)
        return Node(**fields)


@dataclass(frozen=True, eq=False)
class Graph:
    """Nodes in topological order plus the named values a caller may fetch."""

    nodes: tuple[Node, ...]
    outputs: Mapping[str, Value] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {node.name: node for node in self.nodes})

    def node(self, name: str) -> Node:
        return self._by_name[name]  # type: ignore[attr-defined]

    def has_node(self, name: str) -> bool:
        return name in self._by_name  # type: ignore[attr-defined]

    def type_of(self, value: Value) -> TensorType:
        return self.node(value.node).types[value.index]

    def nodes_with_op(self, *ops: str) -> list[Node]:
        return [node for node in self.nodes if node.op in ops]

    def consumers(self) -> dict[str, list[Node]]:
        """Map each node name to the nodes that read one of its outputs or wait on it."""
        readers: dict[str, list[Node]] = {node.name: [] for node in self.nodes}
        for node in self.nodes:
            for source in {value.node for value in node.inputs} | set(node.control_inputs):
                readers[source].append(node)
        return readers

    def with_outputs(self, outputs: Mapping[str, Value]) -> Graph:
        return Graph(self.nodes, dict(outputs))

    def with_nodes(self, nodes: Iterable[Node]) -> Graph:
        return Graph(tuple(nodes), self.outputs)

    def __len__(self) -> int:
        return len(self.nodes)

    def __str__(self) -> str:
        lines = []
        for node in self.nodes:
            args = ", ".join(str(value) for value in node.inputs)
            attrs = ", ".join(
                f"{key}={value!r}" for key, value in node.attrs.items() if key != "value"
            )
            types = ", ".join(str(t) for t in node.types)
            where = f" @{node.device}" if node.device else ""
            after = f" after({', '.join(node.control_inputs)})" if node.control_inputs else ""
            lines.append(
                f"{node.name} = {node.op}({args}{'; ' + attrs if attrs else ''})"
                f" -> {types}{where}{after}"
            )
        lines.append("outputs: " + ", ".join(f"{k}={v}" for k, v in self.outputs.items()))
        return "\n".join(lines)
