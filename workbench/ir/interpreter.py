"""The reference interpreter: runs any graph on one device with NumPy or CuPy.

It is the oracle every distributed strategy is checked against, and also the executor each
device uses for its own partition. A graph is compiled once into a flat list of steps (impl,
argument slots, attributes) so a training step costs one Python call per node and nothing more;
values are dropped after their last reader so peak memory matches a hand-written step.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workbench.ir.graph import Graph, Value
from workbench.ir.rules import IMPL_RULES, OPS


class ExecutionError(RuntimeError):
    """A node failed while running; the message names the node and op."""


class Executable:
    """A graph compiled for repeated execution.

    Examples
    --------
    >>> import numpy as np
    >>> from workbench.ir import GraphBuilder, Executable, ops
    >>> b = GraphBuilder()
    >>> x = b.placeholder("x", (2,), "float64")
    >>> exe = Executable(b.build({"y": ops.exp(x) * 0.0 + 1.0}))
    >>> exe.run({"x": np.zeros(2)})["y"]
    array([1., 1.])
    """

    def __init__(self, graph: Graph, fetches: Mapping[str, Value] | None = None) -> None:
        self.graph = graph
        self.fetches = dict(graph.outputs if fetches is None else fetches)
        slot_of: dict[Value, int] = {}
        for node in graph.nodes:
            for index in range(len(node.types)):
                slot_of[Value(node.name, index)] = len(slot_of)
        self.slot_count = len(slot_of)
        self.placeholders: dict[str, int] = {}
        # Constants are moved to the device once per array module, not once per step.
        self._constants: dict[int, Any] = {}
        self._constants_on: dict[str, list[tuple[int, Any]]] = {}
        last_reader: dict[int, int] = {}
        self.steps: list[tuple[Any, ...]] = []
        for position, node in enumerate(graph.nodes):
            outputs = tuple(slot_of[node.output(i)] for i in range(len(node.types)))
            if node.op == "placeholder":
                self.placeholders[node.name] = outputs[0]
                continue
            if node.op == "constant":
                self._constants[outputs[0]] = node.attrs["value"]
                continue
            inputs = tuple(slot_of[value] for value in node.inputs)
            for slot in inputs:
                last_reader[slot] = position
            self.steps.append(
                (
                    node,
                    IMPL_RULES[node.op],
                    inputs,
                    outputs,
                    dict(node.attrs),
                    OPS[node.op].stateful,
                    position,
                )
            )
        self.fetch_slots = {key: slot_of[value] for key, value in self.fetches.items()}
        # Where each fetched value is produced: on_fetch fires right after that step.
        produced_at = {
            slot: position for (_, _, _, outputs, _, _, position) in self.steps for slot in outputs
        }
        self._fetched_at: dict[int, tuple[str, ...]] = {}
        for key, slot in self.fetch_slots.items():
            if slot in produced_at:
                self._fetched_at.setdefault(produced_at[slot], ())
                self._fetched_at[produced_at[slot]] += (key,)
        kept = set(self.fetch_slots.values())
        # After each step, forget the values nobody reads later (unless they are fetched).
        self._release: dict[int, tuple[int, ...]] = {}
        for slot, position in last_reader.items():
            if slot not in kept:
                self._release.setdefault(position, ())
                self._release[position] += (slot,)

    def run(
        self,
        feeds: Mapping[str, Any],
        state: dict[str, Any] | None = None,
        xp: Any = None,
        on_fetch: Any = None,
        on_node: Any = None,
    ) -> dict[str, Any]:
        """Execute once. ``feeds`` maps placeholder names to arrays; ``state`` is the variable
        store that ``variable`` and update ops read and write in place. ``on_fetch(name,
        value)``, if given, is called as soon as each fetched value is computed (how a
        data-parallel device starts reducing a gradient bucket while backward goes on).
        ``on_node(node, result)``, if given, is called after each node runs (how calibration
        times every node at its shapes)."""
        if xp is None:
            import numpy as xp
        missing = set(self.placeholders) - set(feeds)
        if missing:
            raise ExecutionError(f"missing feeds for placeholders: {', '.join(sorted(missing))}")
        values: list[Any] = [None] * self.slot_count
        for name, slot in self.placeholders.items():
            values[slot] = feeds[name]
        constants = self._constants_on.get(xp.__name__)
        if constants is None:
            constants = [(slot, xp.asarray(value)) for slot, value in self._constants.items()]
            self._constants_on[xp.__name__] = constants
        for slot, value in constants:
            values[slot] = value
        release = self._release
        for node, impl, inputs, outputs, attrs, stateful, position in self.steps:
            args = [values[slot] for slot in inputs]
            try:
                result = (
                    impl(xp, *args, state=state, **attrs) if stateful else impl(xp, *args, **attrs)
                )
            except Exception as error:
                raise ExecutionError(f"node {node.name!r} ({node.op}) failed: {error}") from error
            if len(outputs) == 1:
                values[outputs[0]] = result
            elif outputs:
                for slot, item in zip(outputs, result):
                    values[slot] = item
            if on_node is not None:
                on_node(node, result)
            if on_fetch is not None:
                for key in self._fetched_at.get(position, ()):
                    on_fetch(key, values[self.fetch_slots[key]])
            for slot in release.get(position, ()):
                values[slot] = None
        return {key: values[slot] for key, slot in self.fetch_slots.items()}


def evaluate(
    graph: Graph, feeds: Mapping[str, Any], state: dict[str, Any] | None = None, xp: Any = None
) -> dict[str, Any]:
    """Compile and run ``graph`` once (convenience for tests and one-off evaluation)."""
    return Executable(graph).run(feeds, state, xp)
