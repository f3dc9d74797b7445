"""Placement: give every node a device, as the TF master's placer does.

Order of authority:

1. explicit constraints written in model code (``with builder.device("/task:1")``), matched
   by their most specific parts against the real device names and refused if they name no
   device;
2. colocation with a variable: an unconstrained read or update of a variable (``var``) runs
   on the device holding it (each device keeps its own variables, so a read elsewhere would
   see another copy), and an update runs where its first input, the read, is;
3. with ``colocate_gradients`` (TF's ``colocate_gradients_with_ops``), a backward node goes
   where its forward node went (autodiff names it ``gradients/<forward node>/...``);
4. the rest by a greedy cost model: in graph order, each node goes to the device where it
   would finish first (:class:`~workbench.passes.list_schedule.DeviceClocks`: the device's
   queued work, ``cost.node_seconds`` there, ``cost.transfer_seconds`` for each input made
   elsewhere), counting, away from its inputs, the trip of its result back to them; ties
   (within a margin of noise) go to the lowest device (:func:`_earliest`).

A source (a placeholder, a constant, a variable), and a node that reads only sources (a
weight's transpose, the labels' one-hot), has nothing to wait for, so "earliest finish" would
put it on whichever device happens to be idle at that point in the order, and its reader
elsewhere would then pay to bring it over, each step. It goes with its first reader instead:
a reader weighing a device counts it as run there just before.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from workbench.costs import CostModel, StaticCostModel
from workbench.ir.graph import Graph, Node
from workbench.passes.list_schedule import DeviceClocks

COLOCATED_WITH_VARIABLE = ("apply_sgd", "apply_momentum", "apply_adam", "assign")
SOURCES = ("placeholder", "constant", "variable")
TIE_FRACTION, TIE_SECONDS = 0.25, 1e-6


class PlacementError(ValueError):
    """A device constraint that names no device (lists the devices there are)."""


def resolve_device(constraint: str, devices: Sequence[str]) -> str:
    """The one device whose name contains every ``/part`` of ``constraint``.

    Examples
    --------
    >>> resolve_device("/task:1", ["/job:worker/task:0/device:CPU:0",
    ...                            "/job:worker/task:1/device:CPU:0"])
    '/job:worker/task:1/device:CPU:0'
    """
    parts = [part for part in constraint.strip("/").split("/") if part]
    # Names without a leading slash (a described cluster's ``host0/gpu1``) match alike.
    matches = [
        d
        for d in devices
        if all(
            f"/{part}/" in f"/{d.lstrip('/')}/" or f"/{part}" in f"/{d.lstrip('/')}/"
            for part in parts
        )
    ]
    if len(matches) != 1:
        listed = ", ".join(devices)
        how = "names no device" if not matches else "is ambiguous"
        raise PlacementError(f"device constraint {constraint!r} {how}; devices: {listed}")
    return matches[0]


def place(
    graph: Graph,
    devices: Sequence[str],
    cost: CostModel | None = None,
    colocate_gradients: bool = True,
    fed_everywhere: Collection[str] = (),
) -> Graph:
    """A copy of ``graph`` with ``device`` set on every node (see the module docstring).

    Parameters
    ----------
    graph : Graph
        The graph; a node's ``device``, if set, is a constraint.
    devices : sequence of str
        The device names, in rank order (ties go to the first).
    cost : CostModel, optional
        Seconds of nodes and transfers (default: :class:`~workbench.costs.StaticCostModel`).
    colocate_gradients : bool
        Backward nodes follow their forward node. Off, the placer may run a weight's gradient
        on another device while the first goes on with the input's gradient.
    fed_everywhere : collection of str
        Placeholders every device can feed itself: a reader anywhere pays nothing for them
        (pass the same names to :func:`~workbench.passes.partition.partition`).

    Examples
    --------
    >>> from workbench.ir import GraphBuilder, ops
    >>> b = GraphBuilder()
    >>> x = b.placeholder("x", (4, 4), "float32")
    >>> with b.device("/task:1"):
    ...     y = ops.exp(x)
    >>> placed = place(b.build({"y": ops.relu(y)}), ["/task:0/cpu", "/task:1/cpu"])
    >>> [node.device for node in placed.nodes]
    ['/task:1/cpu', '/task:1/cpu', '/task:1/cpu']
    """
    devices = list(devices)
    chosen = _constrained(graph, devices)
    homes = _variable_homes(graph, chosen)
    clocks = DeviceClocks(graph, devices, cost or StaticCostModel(), fed_everywhere)
    waiting: dict[str, Node] = {}  # nodes that go with their first reader, not placed yet
    for node in graph.nodes:
        device = chosen.get(node.name) or _colocated(node, clocks, homes, colocate_gradients)
        if device is None and _made_from_sources(graph, node):
            waiting[node.name] = node
            continue
        first = _waiting_inputs(node, waiting)
        if device is None:
            device = _earliest(clocks, node, devices, first)
        for each in first:
            _commit(clocks, waiting.pop(each.name), device, homes)
        _commit(clocks, node, device, homes)
    for node in list(waiting.values()):  # read by nothing: where it would finish first
        if node.name in waiting:
            first = _waiting_inputs(node, waiting)
            device = _earliest(clocks, node, devices, first)
            for each in [*first, node]:
                _commit(clocks, waiting.pop(each.name), device, homes)
    where = clocks.device
    return graph.with_nodes(node.replace(device=where[node.name]) for node in graph.nodes)


def _made_from_sources(graph: Graph, node: Node) -> bool:
    """A source (placeholder, constant, variable), or a node that reads only sources (a
    weight's transpose, the labels' one-hot): either is ready whenever its reader wants it."""
    if node.control_inputs:
        return False
    return all(graph.node(value.node).op in SOURCES for value in node.inputs)


def _waiting_inputs(node: Node, waiting: dict[str, Node]) -> list[Node]:
    """The waiting nodes ``node`` reads, with the waiting nodes they read, in graph order
    (``waiting`` is filled in graph order)."""
    found: dict[str, Node] = {}

    def visit(each: Node) -> None:
        for value in each.inputs:
            if value.node in waiting and value.node not in found:
                visit(waiting[value.node])
                found[value.node] = waiting[value.node]

    visit(node)
    return [each for name, each in waiting.items() if name in found]


def _constrained(graph: Graph, devices: list[str]) -> dict[str, str]:
    chosen: dict[str, str] = {}
    for node in graph.nodes:
        if node.device is not None:
            try:
                chosen[node.name] = resolve_device(node.device, devices)
            except PlacementError as error:
                raise PlacementError(f"node {node.name!r}: {error}") from None
    return chosen


def _variable(node: Node) -> str | None:
    """The variable a read or an update belongs to."""
    if node.op == "variable" or node.op in COLOCATED_WITH_VARIABLE:
        return node.attrs.get("var")
    return None


def _variable_homes(graph: Graph, chosen: dict[str, str]) -> dict[str, str]:
    """Where each constrained variable lives: its first constrained read or update's device.
    (Mirrored in-graph towers pin a copy of one variable to each device; only unconstrained
    reads and updates follow the home.)"""
    homes: dict[str, str] = {}
    for node in graph.nodes:
        variable = _variable(node)
        if variable is not None and node.name in chosen:
            homes.setdefault(variable, chosen[node.name])
    return homes


def _colocated(
    node: Node, clocks: DeviceClocks, homes: dict[str, str], gradients: bool
) -> str | None:
    """The device colocation decides for an unconstrained node, or None."""
    variable = _variable(node)
    if variable in homes:
        return homes[variable]
    if node.op in COLOCATED_WITH_VARIABLE and node.inputs:
        return clocks.device.get(node.inputs[0].node) or None
    if gradients and node.name.startswith("gradients/"):
        parts = node.name.split("/")[1:]
        for end in range(len(parts) - 1, 0, -1):
            forward = clocks.device.get("/".join(parts[:end]))
            if forward:
                return forward
    return None


def _earliest(clocks: DeviceClocks, node: Node, devices: list[str], first: list[Node]) -> str:
    """The device where ``node`` (after the waiting nodes ``first`` it reads) would have its
    result ready first, back where its inputs are.

    A device other than the one holding most of the inputs is charged for sending the result
    back there: the order is greedy, and a node moved to an idle device is judged by its own
    finish, not by when its reader, back on the first device, gets it. A weight's gradient
    still moves when it pays for the trip back to its update. A node whose inputs are all
    everywhere is at home on the first device.

    The first device within the tie margin of the earliest wins: ``TIE_FRACTION`` of the
    nodes' time plus ``TIE_SECONDS``. Two identical devices' measured times of one op differ
    by 5-20% (calibration noise), which must not decide.
    """
    home = clocks.home(node, {each.name for each in first}) or devices[0]
    ready = {
        d: clocks.finish_at(node, d, first) + clocks.back_seconds(node, d, home) for d in devices
    }
    best = min(ready.values())
    for device in devices:
        seconds = sum(clocks.cost.node_seconds(clocks.graph, n, device) for n in [*first, node])
        if ready[device] <= best + TIE_FRACTION * seconds + TIE_SECONDS:
            return device
    raise AssertionError("the earliest device is within its own margin")


def _commit(clocks: DeviceClocks, node: Node, device: str, homes: dict[str, str]) -> None:
    clocks.commit(node, device)
    variable = _variable(node)
    if variable is not None:
        homes.setdefault(variable, device)
