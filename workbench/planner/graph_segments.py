"""A graph as the simulator sees it: runs of compute between the points that matter (a
gradient completing a bucket, a Send, a Recv), each run's seconds from the cost model."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from workbench.ir import Graph, Node
from workbench.planner.device_costs import DeviceCosts
from workbench.simulate import Action, Compute

FREE_OPS = ("placeholder", "constant")
# Send/Recv nodes cost what their link costs: the caller turns them into Send/Recv actions.
TRANSFER_OPS = ("send", "recv")


def graph_seconds(graph: Graph, costs: DeviceCosts, device: str) -> float:
    """The summed seconds of every node ``graph`` executes on ``device``."""
    return sum(
        costs.node_seconds(graph, node, device) for node in graph.nodes if node.op not in FREE_OPS
    )


def seconds_until(graph: Graph, output: str, costs: DeviceCosts, device: str) -> float:
    """The summed seconds of ``graph``'s nodes up to and including the one that computes its
    output ``output``: how far into a run that output is ready (a pipeline backward sends
    its input gradient then, before its weight gradients)."""
    producer = graph.outputs[output].node
    seconds = 0.0
    for node in graph.nodes:
        if node.op not in FREE_OPS:
            seconds += costs.node_seconds(graph, node, device)
        if node.name == producer:
            return seconds
    raise ValueError(f"no node of the graph computes its output {output!r}")


def node_actions(
    graph: Graph,
    costs: DeviceCosts,
    device: str,
    after_node: Callable[[Node], Iterable[Action]],
    phase_of: Callable[[Node], str] = lambda node: "compute",
    label: str = "compute",
    stretch: float = 1.0,
) -> list[Action]:
    """Compute actions for ``graph``'s nodes in order, merged into one action per run of
    nodes of one phase, with ``after_node(node)``'s actions cut in after each node; each
    node's seconds times ``stretch`` (a synchronous replica's wait for the slowest)."""
    actions: list[Action] = []
    pending, pending_phase = 0.0, "compute"

    def flush() -> None:
        nonlocal pending
        if pending > 0:
            actions.append(Compute(pending, label, phase=pending_phase))
        pending = 0.0

    for node in graph.nodes:
        if node.op in FREE_OPS:
            continue
        phase = phase_of(node)
        if phase != pending_phase:
            flush()
            pending_phase = phase
        if node.op not in TRANSFER_OPS:
            pending += costs.node_seconds(graph, node, device) * stretch
        extra = list(after_node(node))
        if extra:
            flush()
            actions += extra
    flush()
    return actions
