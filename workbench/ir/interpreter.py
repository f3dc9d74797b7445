"""The reference interpreter: runs any graph on one device with NumPy or CuPy.

It is the oracle every distributed strategy is checked against, and also the executor each
device uses for its own partition. A graph is compiled once into a flat list of steps (impl,
argument slots, attributes) so a training step costs one Python call per node and nothing more;
values are dropped after their last reader so peak memory matches a hand-written step.

Given a :class:`~workbench.ir.memory.MemoryLedger`, a run also counts the bytes it keeps live
(docs/guide/command-line.md, "Measured memory"): each value is held from the moment it is fed
or computed until the interpreter drops it, counted by the buffer it views, so a view (reshape,
transpose, slice, split, broadcast) or a read of a variable the device already holds adds
nothing.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from workbench.ir.graph import Graph, Value
from workbench.ir.memory import MemoryLedger
from workbench.ir.rules import IMPL_RULES, OPS

# Fetched values under this prefix are parameter gradients (workbench.training.graphs names
# them so); the ledger counts them apart from the other values a step keeps.
GRADIENT_PREFIX = "grad/"
_CATEGORY_OF_OP = {"variable": "parameters", "recv": "communication", "all_reduce": "communication"}


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
        # A value nobody reads goes right after the step that made it; a fed value or constant
        # nobody reads goes at the end of the run.
        drop_at = dict(produced_at)
        drop_at.update(last_reader)
        self._sources = (*self.placeholders.values(), *self._constants)
        # After each step, forget the values nobody reads later: unless they are fetched
        # (returned by run), or, when the run does not keep its fetches, whatever they are.
        self._release = _schedule(drop_at, kept)
        self._release_fetched = _schedule(drop_at, set())
        self._sources_fetched = tuple(
            (key, slot) for key, slot in self.fetch_slots.items() if slot not in produced_at
        )
        # The ledger's category of each slot: fetched gradients apart, variable reads as
        # parameters (one the device holds adds nothing; one gathered from shards is a
        # parameter while it lives), tensors received from another device or summed with
        # other devices as communication, every other value an activation.
        self._category = ["activations"] * self.slot_count
        for node, _, _, outputs, _, _, _ in self.steps:
            if node.op in _CATEGORY_OF_OP:
                self._category[outputs[0]] = _CATEGORY_OF_OP[node.op]
        for key, slot in self.fetch_slots.items():
            if key.startswith(GRADIENT_PREFIX):
                self._category[slot] = "gradients"

    def run(
        self,
        feeds: Mapping[str, Any],
        state: dict[str, Any] | None = None,
        xp: Any = None,
        on_fetch: Any = None,
        on_node: Any = None,
        ledger: MemoryLedger | None = None,
        keep_fetches: bool = True,
    ) -> dict[str, Any]:
        """Execute once. ``feeds`` maps placeholder names to arrays; ``state`` is the variable
        store that ``variable`` and update ops read and write in place. ``on_fetch(name,
        value)``, if given, is called as soon as each fetched value is computed (how a
        data-parallel device starts reducing a gradient bucket while backward goes on).
        ``on_node(node, result)``, if given, is called after each node runs (how calibration
        times every node at its shapes).

        ``ledger``, if given, counts every value fed or computed from the moment it appears
        until it is dropped; everything the run held is released by the time it returns
        (fetched values included: a caller that keeps them holds them itself).
        ``keep_fetches=False`` hands each fetched value to ``on_fetch`` and then drops it
        like any other value, after its last reader; the run then returns an empty dict."""
        if xp is None:
            import numpy as xp
        missing = set(self.placeholders) - set(feeds)
        if missing:
            raise ExecutionError(f"missing feeds for placeholders: {', '.join(sorted(missing))}")
        if not keep_fetches and on_fetch is None:
            raise ValueError("a run that does not keep its fetches needs on_fetch")
        values: list[Any] = [None] * self.slot_count
        for name, slot in self.placeholders.items():
            values[slot] = feeds[name]
        constants = self._constants_on.get(xp.__name__)
        if constants is None:
            constants = [(slot, xp.asarray(value)) for slot, value in self._constants.items()]
            self._constants_on[xp.__name__] = constants
        for slot, value in constants:
            values[slot] = value
        if ledger is not None:
            return self._run_counted(values, state, xp, on_fetch, on_node, ledger, keep_fetches)
        if not keep_fetches:
            for key, slot in self._sources_fetched:
                on_fetch(key, values[slot])
        release = self._release if keep_fetches else self._release_fetched
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
        if not keep_fetches:
            return {}
        return {key: values[slot] for key, slot in self.fetch_slots.items()}

    def _run_counted(
        self,
        values: list[Any],
        state: dict[str, Any] | None,
        xp: Any,
        on_fetch: Any,
        on_node: Any,
        ledger: MemoryLedger,
        keep_fetches: bool,
    ) -> dict[str, Any]:
        """:meth:`run`'s loop with every value held in ``ledger`` while it lives (apart from
        the loop without one, so an uncounted run pays nothing for counting)."""
        category = self._category
        # The ledger key each live value is held under (its buffer's), None once dropped.
        held: list[Hashable | None] = [None] * self.slot_count
        for slot in self._sources:
            held[slot] = ledger.hold_value(category[slot], values[slot])
        if not keep_fetches:
            for key, slot in self._sources_fetched:
                on_fetch(key, values[slot])
        release = self._release if keep_fetches else self._release_fetched
        try:
            for node, impl, inputs, outputs, attrs, stateful, position in self.steps:
                args = [values[slot] for slot in inputs]
                try:
                    result = (
                        impl(xp, *args, state=state, **attrs)
                        if stateful
                        else impl(xp, *args, **attrs)
                    )
                except Exception as error:
                    raise ExecutionError(
                        f"node {node.name!r} ({node.op}) failed: {error}"
                    ) from error
                if len(outputs) == 1:
                    values[outputs[0]] = result
                    held[outputs[0]] = ledger.hold_value(category[outputs[0]], result)
                elif outputs:
                    for slot, item in zip(outputs, result):
                        values[slot] = item
                        held[slot] = ledger.hold_value(category[slot], item)
                if on_node is not None:
                    on_node(node, result)
                if on_fetch is not None:
                    for key in self._fetched_at.get(position, ()):
                        on_fetch(key, values[self.fetch_slots[key]])
                for slot in release.get(position, ()):
                    buffer_key = held[slot]
                    if buffer_key is not None:
                        ledger.release(buffer_key)
                        held[slot] = None
                    values[slot] = None
            fetched = (
                {key: values[slot] for key, slot in self.fetch_slots.items()}
                if keep_fetches
                else {}
            )
        finally:
            # Whatever is still live goes with the run: fetched values (the caller holds what
            # it keeps), and fed values or constants nobody read. A failed run releases the
            # same way, so the ledger never keeps a dropped value.
            for buffer_key in held:
                if buffer_key is not None:
                    ledger.release(buffer_key)
        return fetched


def evaluate(
    graph: Graph, feeds: Mapping[str, Any], state: dict[str, Any] | None = None, xp: Any = None
) -> dict[str, Any]:
    """Compile and run ``graph`` once (convenience for tests and one-off evaluation)."""
    return Executable(graph).run(feeds, state, xp)


def _schedule(drop_at: Mapping[int, int], kept: set[int]) -> dict[int, tuple[int, ...]]:
    """Which slots to forget after each step: those dropped there, apart from ``kept``."""
    release: dict[int, tuple[int, ...]] = {}
    for slot, position in drop_at.items():
        if slot not in kept:
            release[position] = (*release.get(position, ()), slot)
    return release
