"""Building graphs: :class:`GraphBuilder` appends nodes, :class:`Tensor` is the handle users hold.

Shape rules run as each node is added, so a mismatch is reported where the user wrote it, with
the node name, the op and every input type.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from workbench.ir.graph import Graph, Node, TensorType, Value
from workbench.ir.rules import OPS, SHAPE_RULES, ShapeError

_NAME_OK = re.compile(r"^[A-Za-z0-9_.\-/]+$")


class GraphBuildError(ValueError):
    """A node could not be added: unknown op, bad attributes or inputs that do not fit."""


class Tensor:
    """A value in a graph under construction, with operators that add nodes to its graph."""

    __slots__ = ("builder", "type", "value")

    def __init__(self, builder: GraphBuilder, value: Value, type_: TensorType) -> None:
        self.builder = builder
        self.value = value
        self.type = type_

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dtype(self) -> str:
        return self.type.dtype

    @property
    def ndim(self) -> int:
        return len(self.type.shape)

    @property
    def name(self) -> str:
        return str(self.value)

    def __repr__(self) -> str:
        return f"Tensor({self.value}, {self.type})"

    def _lift(self, other: Any) -> Tensor:
        if isinstance(other, Tensor):
            return other
        return self.builder.constant(np.asarray(other, dtype=self.dtype))

    def _binary(self, op: str, other: Any, reverse: bool = False) -> Tensor:
        other = self._lift(other)
        a, b = (other, self) if reverse else (self, other)
        return self.builder.emit(op, [a, b])

    def __add__(self, other: Any) -> Tensor:
        return self._binary("add", other)

    def __radd__(self, other: Any) -> Tensor:
        return self._binary("add", other, reverse=True)

    def __sub__(self, other: Any) -> Tensor:
        return self._binary("sub", other)

    def __rsub__(self, other: Any) -> Tensor:
        return self._binary("sub", other, reverse=True)

    def __mul__(self, other: Any) -> Tensor:
        return self._binary("mul", other)

    def __rmul__(self, other: Any) -> Tensor:
        return self._binary("mul", other, reverse=True)

    def __truediv__(self, other: Any) -> Tensor:
        return self._binary("div", other)

    def __rtruediv__(self, other: Any) -> Tensor:
        return self._binary("div", other, reverse=True)

    def __matmul__(self, other: Tensor) -> Tensor:
        return self.builder.emit("matmul", [self, other])

    def __neg__(self) -> Tensor:
        return self.builder.emit("neg", [self])


class GraphBuilder:
    """Appends nodes in topological order; ``build`` freezes them into a :class:`Graph`.

    Examples
    --------
    >>> from workbench.ir import GraphBuilder, ops
    >>> b = GraphBuilder()
    >>> x = b.placeholder("x", (2, 3), "float64")
    >>> y = ops.relu(x) * 2.0
    >>> graph = b.build({"y": y})
    >>> [node.op for node in graph.nodes]
    ['placeholder', 'relu', 'constant', 'mul']
    """

    def __init__(self, graph: Graph | None = None) -> None:
        self.nodes: list[Node] = list(graph.nodes) if graph is not None else []
        self._names = {node.name for node in self.nodes}
        self._types = {node.name: node.types for node in self.nodes}
        self._scopes: list[str] = []
        self._devices: list[str] = []
        self._counters: dict[str, int] = {}

    # --- naming and context --------------------------------------------------------------

    @contextlib.contextmanager
    def scope(self, name: str) -> Iterator[None]:
        """Prefix the names of nodes built inside with ``name/``."""
        self._scopes.append(name)
        try:
            yield
        finally:
            self._scopes.pop()

    @contextlib.contextmanager
    def device(self, device: str) -> Iterator[None]:
        """Constrain the nodes built inside to ``device`` (honoured by the ``place`` pass)."""
        self._devices.append(device)
        try:
            yield
        finally:
            self._devices.pop()

    def unique_name(self, base: str) -> str:
        prefix = "/".join([*self._scopes, base])
        if prefix not in self._names:
            return prefix
        count = self._counters.get(prefix, 1)
        while f"{prefix}_{count}" in self._names:
            count += 1
        self._counters[prefix] = count + 1
        return f"{prefix}_{count}"

    # --- nodes ---------------------------------------------------------------------------

    def tensor(self, value: Value) -> Tensor:
        return Tensor(self, value, self._types[value.node][value.index])

    def emit(
        self,
        op: str,
        inputs: Sequence[Tensor],
        *,
        name: str | None = None,
        control_inputs: Sequence[str] = (),
        **attrs: Any,
    ) -> Any:
        """Add one node; return its Tensor, a tuple for multi-output ops, the Node for none."""
        if op not in OPS:
            raise GraphBuildError(f"unknown op {op!r}")
        for tensor in inputs:
            if not isinstance(tensor, Tensor) or tensor.builder is not self:
                raise GraphBuildError(f"{op}: inputs must be tensors of this graph, got {tensor!r}")
        node_name = self.unique_name(op) if name is None else self._explicit_name(name)
        input_types = tuple(tensor.type for tensor in inputs)
        try:
            types = SHAPE_RULES[op](input_types, **attrs)
        except ShapeError as error:
            shown = ", ".join(str(t) for t in input_types)
            raise ShapeError(f"{error} (node {node_name!r}, inputs: {shown})") from None
        except TypeError as error:
            raise GraphBuildError(f"{op} {node_name!r}: bad attributes {attrs}: {error}") from None
        node = Node(
            name=node_name,
            op=op,
            inputs=tuple(tensor.value for tensor in inputs),
            attrs=attrs,
            types=types,
            control_inputs=tuple(control_inputs),
            device=self._devices[-1] if self._devices else None,
        )
        self.add_node(node)
        if not types:
            return node  # update ops have no outputs; callers order on them by node name
        outputs = tuple(Tensor(self, Value(node_name, i), t) for i, t in enumerate(types))
        return outputs[0] if len(outputs) == 1 else outputs

    def add_node(self, node: Node) -> None:
        if node.name in self._names:
            raise GraphBuildError(f"node name {node.name!r} is used twice")
        self.nodes.append(node)
        self._names.add(node.name)
        self._types[node.name] = node.types

    def _explicit_name(self, name: str) -> str:
        full = "/".join([*self._scopes, name])
        if not _NAME_OK.match(full):
            raise GraphBuildError(f"node name {full!r} may hold only letters, digits, _ . - /")
        if full in self._names:
            raise GraphBuildError(f"node name {full!r} is used twice")
        return full

    # --- sources -------------------------------------------------------------------------

    def placeholder(self, name: str, shape: Sequence[int], dtype: str) -> Tensor:
        """An input fed at run time under ``name``."""
        return self.emit("placeholder", [], name=name, shape=tuple(shape), dtype=dtype)

    def variable(self, name: str, shape: Sequence[int], dtype: str) -> Tensor:
        """Read the device-resident variable ``name`` (its value lives in the variable store)."""
        return self.emit(
            "variable", [], name=self.unique_name(name), var=name, shape=tuple(shape), dtype=dtype
        )

    def constant(self, value: Any, dtype: str | None = None) -> Tensor:
        array = np.asarray(value, dtype=dtype)
        array.setflags(write=False)
        return self.emit("constant", [], value=array)

    def build(self, outputs: Mapping[str, Tensor | Value]) -> Graph:
        named = {
            key: (item.value if isinstance(item, Tensor) else item) for key, item in outputs.items()
        }
        return Graph(tuple(self.nodes), named)
