"""The list schedule of a placed graph: what a cost model predicts for when each node starts
and finishes as the devices run their partitions (the op order within a step, not a pipeline's
micro-batch schedule nor a learning-rate schedule).

The model is the runtime's (docs/architecture/one-step.md, "Model parallel"):

- each device runs its own nodes one at a time, in graph order;
- a value made on another device is sent right after the node that makes it
  (:func:`~workbench.passes.partition.partition`) and received, once per device, right before
  its first reader there. ``cost.transfer_seconds(bytes, source, device)`` is the whole
  trip: ``transfer_seconds(0, ...)`` of it is latency, and the rest is copying, half by the
  sender (into the shared-memory segment) and half by the receiver (out of it), each on its
  own device's time;
- a control input from another device arrives as an empty token; a placeholder every device
  feeds itself (``fed_everywhere``) is there at once.

The greedy placer (:func:`~workbench.passes.place.place`) asks the same questions node by
node, before the devices are known; it charges a sender's copy when it places the reader, so
nodes the sender was already given are not moved (a slight underestimate).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from workbench.costs import CostModel
from workbench.ir.graph import Graph, Node

_Receive = tuple[str, str, int]  # (node sent, receiving device, output index or -1: a token)


@dataclass(frozen=True)
class Schedule:
    """Predicted seconds of one step of a placed graph.

    ``busy``: each device's work, its nodes' predicted seconds and its share of the copies;
    ``seconds``: when the last node finishes (the step, without what the runtime adds
    around it).
    """

    devices: tuple[str, ...]
    start: Mapping[str, float]
    finish: Mapping[str, float]
    busy: Mapping[str, float]
    seconds: float


class DeviceClocks:
    """The devices' clocks while nodes are committed to them in graph order.

    Examples
    --------
    >>> from workbench.costs import StaticCostModel
    >>> from workbench.ir import GraphBuilder, ops
    >>> b = GraphBuilder()
    >>> x = b.placeholder("x", (1000, 1000), "float32")
    >>> graph = b.build({"y": ops.matmul(x, x)})
    >>> clocks = DeviceClocks(graph, ["a", "b"], StaticCostModel(1e9), fed_everywhere=["x"])
    >>> [clocks.finish_at(graph.nodes[1], d) for d in ("a", "b")]
    [2.0, 2.0]
    >>> clocks.commit(graph.nodes[0], "a"); clocks.commit(graph.nodes[1], "a")
    >>> clocks.finish_at(graph.nodes[1], "a"), clocks.schedule().busy
    (4.0, {'a': 2.0, 'b': 0.0})
    """

    def __init__(
        self,
        graph: Graph,
        devices: Sequence[str],
        cost: CostModel,
        fed_everywhere: Collection[str] = (),
    ) -> None:
        self.graph, self.devices, self.cost = graph, tuple(devices), cost
        self.fed_everywhere = frozenset(fed_everywhere)
        self.free = dict.fromkeys(self.devices, 0.0)
        self.busy = dict.fromkeys(self.devices, 0.0)
        self.device: dict[str, str] = {}
        self.start: dict[str, float] = {}
        self.finish: dict[str, float] = {}
        self.received: dict[_Receive, float] = {}

    def finish_at(self, node: Node, device: str, first: Sequence[Node] = ()) -> float:
        """When ``node`` would finish on ``device`` if the uncommitted nodes ``first`` (its
        inputs still to place, in graph order) ran there just before it. Nothing changes."""
        time = self.free[device]
        made: dict[str, float] = {}
        for each in [*first, node]:
            ready, _ = self._receive(each, device, made, time)
            time = made[each.name] = ready + self.cost.node_seconds(self.graph, each, device)
        return time

    def home(self, node: Node, here: Collection[str] = ()) -> str | None:
        """The device holding most bytes of ``node``'s inputs (made or received there; ties to
        the first device), or None if every input is everywhere or still to be placed (named
        in ``here``)."""
        held = dict.fromkeys(self.devices, 0)
        for value in dict.fromkeys(node.inputs):
            if value.node in here or value.node in self.fed_everywhere:
                continue
            nbytes = self.graph.type_of(value).nbytes + 1  # an empty tensor still says where
            for device in self.devices:
                made = self.device[value.node] == device
                if made or (value.node, device, value.index) in self.received:
                    held[device] += nbytes
        most = max(held.values())
        return next(d for d in self.devices if held[d] == most) if most else None

    def back_seconds(self, node: Node, device: str, home: str | None) -> float:
        """What bringing ``node``'s outputs from ``device`` to ``home`` would take."""
        if home is None or home == device:
            return 0.0
        nbytes = sum(kind.nbytes for kind in node.types)
        return self.cost.transfer_seconds(nbytes, device, home)

    def commit(self, node: Node, device: str) -> None:
        ready, copies = self._receive(node, device)
        for (name, _, index), (seconds, arrived) in copies.items():
            source = self.device[name]
            self.free[source] += seconds  # its Send, copying into the segment
            self.busy[source] += seconds
            self.busy[device] += seconds  # the Recv, copying out
            self.received[name, device, index] = arrived
        seconds = self.cost.node_seconds(self.graph, node, device)
        self.device[node.name] = device
        self.start[node.name], self.finish[node.name] = ready, ready + seconds
        self.free[device] = ready + seconds
        self.busy[device] += seconds

    def schedule(self) -> Schedule:
        return Schedule(
            self.devices,
            dict(self.start),
            dict(self.finish),
            dict(self.busy),
            max(self.finish.values(), default=0.0),
        )

    def _receive(
        self,
        node: Node,
        device: str,
        made: Mapping[str, float] | None = None,
        start: float | None = None,
    ) -> tuple[float, dict[_Receive, tuple[float, float]]]:
        """When ``node`` can start on ``device`` (free from ``start``, by default its clock),
        and the transfers it would start: for each, the copy seconds on either side and when
        the Recv is done. ``made``: nodes tried on ``device`` but not committed, and when."""
        time = self.free[device] if start is None else start
        made = made or {}
        copies: dict[_Receive, tuple[float, float]] = {}
        needs = [(value.node, value.index) for value in node.inputs]
        needs += [(name, -1) for name in node.control_inputs]
        for name, index in dict.fromkeys(needs):
            if name in self.fed_everywhere:
                continue
            if name in made:
                time = max(time, made[name])
                continue
            source = self.device[name]
            key = (name, device, index)
            if source == device:
                time = max(time, self.finish[name])
            elif key in self.received:
                time = max(time, self.received[key])
            else:  # a Recv, run in order before the node: wait for the bytes, copy them out
                nbytes = 0 if index < 0 else self.graph.node(name).types[index].nbytes
                whole = self.cost.transfer_seconds(nbytes, source, device)
                latency = min(whole, self.cost.transfer_seconds(0, source, device))
                copy = (whole - latency) / 2
                time = max(time, self.finish[name] + copy + latency) + copy
                copies[key] = (copy, time)
        return time, copies


def predict_schedule(
    graph: Graph, devices: Sequence[str], cost: CostModel, fed_everywhere: Collection[str] = ()
) -> Schedule:
    """The predicted step of ``graph`` as placed (every node has a device), partitioned with
    the same ``fed_everywhere``.

    Examples
    --------
    >>> from workbench.costs import StaticCostModel
    >>> from workbench.ir import GraphBuilder, ops
    >>> b = GraphBuilder()
    >>> with b.device("a"):
    ...     x = b.placeholder("x", (1000, 1000), "float32")
    ...     y = ops.matmul(x, x)
    >>> schedule = predict_schedule(b.build({"y": y}), ["a"], StaticCostModel(1e9))
    >>> schedule.busy, schedule.seconds
    ({'a': 2.0}, 2.0)
    """
    clocks = DeviceClocks(graph, devices, cost, fed_everywhere)
    for node in graph.nodes:
        if node.device is None:
            raise ValueError(f"node {node.name!r} has no device: place the graph first")
        clocks.commit(node, node.device)
    return clocks.schedule()
