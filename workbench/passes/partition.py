"""Partition: one subgraph per device, with a Send/Recv pair on every edge the placement cuts.

Like the TF master's partitioner: a value needed on another device is sent once and received
once per destination device (however many nodes there read it), the pair sharing a rendezvous
key ``<value>-><device>``; a control edge across devices becomes a Send/Recv of an empty token.
Every node keeps its name, so a partition reads like the slice of the original graph it is.

Two steps: :func:`collect` finds the cut (what crosses devices, and each device's nodes,
Sends and Recvs in the order it runs them) as immutable data, building no node; :func:`emit`
builds the partitions from it, each node from one entry.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np

from workbench.ir.graph import Graph, Node, TensorType, Value
from workbench.passes.verify import verify


class PartitionError(ValueError):
    pass


_TOKEN = TensorType((0,), "float32")  # what a control edge across devices sends


@dataclass(frozen=True)
class Transfer:
    key: str
    value: Value
    source: str
    target: str
    nbytes: int
    shape: tuple[int, ...] = ()


@dataclass(frozen=True)
class Partitioned:
    partitions: dict[str, Graph]
    transfers: tuple[Transfer, ...]

    def describe(self, seconds: Mapping[str, float] | None = None) -> str:
        """Each partition's nodes, then each Send/Recv pair: key, devices, bytes and, given
        ``seconds`` (predicted, by key), its time."""
        lines = []
        for device, part in self.partitions.items():
            ops = [n.op for n in part.nodes]
            collectives = ops.count("all_reduce")
            also = f", {collectives} all-reduce" if collectives else ""
            lines.append(
                f"{device}: {len(part.nodes)} nodes "
                f"({ops.count('send')} send, {ops.count('recv')} recv{also})"
            )
        for t in self.transfers:
            time = f", {1e3 * seconds[t.key]:.3f} ms" if seconds and t.key in seconds else ""
            lines.append(f"  {t.key}: {t.source} -> {t.target}, {t.nbytes:,} bytes{time}")
        return "\n".join(lines)


def partition(
    graph: Graph, devices: Sequence[str], fed_everywhere: Collection[str] = ()
) -> Partitioned:
    """Split a placed graph (every node has a device) into per-device graphs.

    A placeholder named in ``fed_everywhere`` is not sent: each device that reads it gets its
    own copy of the placeholder and feeds it (a model-parallel device makes the batch, the
    learning rate and the dropout seed itself, the same on every device).

    A device runs its partition in order, so each Send comes right after the node that makes
    the value (or, for a token, the node waited on): placed where its reader is, it would also
    wait for everything the source device runs in between. Each Recv comes right before its
    first reader.
    """
    return emit(collect(graph, devices, fed_everywhere))


# --- collect: what crosses devices, and where each device's nodes go --------------------------


@dataclass(frozen=True)
class Crossing:
    """``value``, made on ``source`` (by the node ``maker``), read on ``target``: one Send
    there, one Recv here. A token (``token/<maker>``, empty) stands for a control edge."""

    value: Value
    maker: str
    source: str
    target: str
    type_: TensorType
    token: bool = False

    @property
    def key(self) -> str:
        return f"{self.value}->{self.target}"

    @property
    def stem(self) -> str:
        return f"{self.value.node}_{self.value.index}"


@dataclass(frozen=True)
class Keep:
    """A node of the graph, its inputs read where it runs."""

    node: Node


@dataclass(frozen=True)
class Copy:
    """A placeholder fed on every device that reads it, copied here."""

    node: Node


@dataclass(frozen=True)
class Receive:
    crossing: Crossing


@dataclass(frozen=True)
class SendOut:
    crossing: Crossing


@dataclass(frozen=True)
class Token:
    """An empty constant made after ``node``, sent to the devices whose nodes wait on it."""

    node: str


Entry = Keep | Copy | Receive | SendOut | Token


@dataclass(frozen=True)
class Cut:
    """A placed graph's cut, as :func:`collect` finds it: each device's entries in the order
    it runs them, the crossings in the order their Sends run (graph order), and which of the
    graph's outputs each device holds."""

    devices: tuple[str, ...]
    placement: Mapping[str, str]  # node -> device
    fed_everywhere: frozenset[str]
    entries: Mapping[str, tuple[Entry, ...]]
    crossings: tuple[Crossing, ...]
    outputs: Mapping[str, Mapping[str, Value]]


def collect(graph: Graph, devices: Sequence[str], fed_everywhere: Collection[str] = ()) -> Cut:
    """Where every node of a placed graph runs, and what each device must send and receive:
    reads nothing but its arguments and builds no node."""
    placement = _placement(graph, devices)
    fed = frozenset(fed_everywhere)
    sends: dict[str, list[Crossing]] = {}
    for crossing in _crossing_reads(graph, placement, fed):
        sends.setdefault(crossing.maker, []).append(crossing)
    entries: dict[str, list[Entry]] = {device: [] for device in devices}
    received: set[tuple[Value, str]] = set()
    crossings: list[Crossing] = []
    for node in graph.nodes:
        device = placement[node.name]
        here = entries[device]
        for value, maker in _reads(node):
            source = placement[maker]
            if source == device or (value, device) in received:
                continue
            received.add((value, device))
            if value.node in fed:
                here.append(Copy(graph.node(value.node)))
            else:
                here.append(Receive(_crossing(graph, value, maker, source, device)))
        here.append(Keep(node))
        values = [c for c in sends.get(node.name, ()) if not c.token]
        tokens = [c for c in sends.get(node.name, ()) if c.token]
        here.extend(SendOut(crossing) for crossing in values)
        if tokens:
            here.append(Token(node.name))
            here.extend(SendOut(crossing) for crossing in tokens)
        crossings += values + tokens
    outputs = {
        device: MappingProxyType(
            {k: v for k, v in graph.outputs.items() if placement[v.node] == device}
        )
        for device in devices
    }
    return Cut(
        tuple(devices),
        MappingProxyType(placement),
        fed,
        MappingProxyType({device: tuple(listed) for device, listed in entries.items()}),
        tuple(crossings),
        MappingProxyType(outputs),
    )


def _placement(graph: Graph, devices: Sequence[str]) -> dict[str, str]:
    placement = {}
    for node in graph.nodes:
        if node.device is None or node.device not in devices:
            raise PartitionError(
                f"node {node.name!r} is placed on {node.device!r}, not one of {devices}; "
                "run the place pass first"
            )
        placement[node.name] = node.device
    return placement


def _reads(node: Node) -> tuple[tuple[Value, str], ...]:
    """What ``node`` reads, each with the node that makes it: its inputs, then a token for
    each node it waits on."""
    inputs = tuple((value, value.node) for value in node.inputs)
    return inputs + tuple((Value(f"token/{name}"), name) for name in node.control_inputs)


def _crossing(graph: Graph, value: Value, maker: str, source: str, target: str) -> Crossing:
    token = value.node != maker
    type_ = _TOKEN if token else graph.type_of(value)
    return Crossing(value, maker, source, target, type_, token)


def _crossing_reads(
    graph: Graph, placement: Mapping[str, str], fed: frozenset[str]
) -> list[Crossing]:
    """Every value (and control edge) read across devices, once per reading device, in the
    order the readers need them: the order each maker sends them in."""
    reads: list[Crossing] = []
    seen: set[tuple[Value, str]] = set()
    for node in graph.nodes:
        device = placement[node.name]
        for value, maker in _reads(node):
            source = placement[maker]
            if source == device or value.node in fed or (value, device) in seen:
                continue
            seen.add((value, device))
            reads.append(_crossing(graph, value, maker, source, device))
    return reads


# --- emit: the partitions, node by node --------------------------------------------------------


def emit(cut: Cut) -> Partitioned:
    """The per-device graphs a :class:`Cut` describes, each verified."""
    index = {device: i for i, device in enumerate(cut.devices)}
    partitions = {}
    for device in cut.devices:
        nodes = tuple(_node(entry, device, cut, index) for entry in cut.entries[device])
        part = Graph(nodes, dict(cut.outputs[device]))
        verify(part, after=f"partition for {device}")
        partitions[device] = part
    transfers = tuple(
        Transfer(c.key, c.value, c.source, c.target, c.type_.nbytes, c.type_.shape)
        for c in cut.crossings
    )
    return Partitioned(partitions, transfers)


def _node(entry: Entry, device: str, cut: Cut, index: Mapping[str, int]) -> Node:
    if isinstance(entry, Keep):
        node = entry.node
        inputs = tuple(_read(value, device, cut, index) for value in node.inputs)
        control = tuple(
            name
            if cut.placement[name] == device
            else _recv_name(Value(f"token/{name}"), cut.placement[name], index)
            for name in node.control_inputs
        )
        return node.replace(inputs=inputs, control_inputs=control)
    if isinstance(entry, Copy):
        return entry.node.replace(device=device)
    if isinstance(entry, Receive):
        c = entry.crossing
        attrs = {
            "key": c.key,
            "source": c.source,
            "target": c.target,
            "shape": c.type_.shape,
            "dtype": c.type_.dtype,
        }
        return Node(
            _recv_name(c.value, c.source, index), "recv", (), attrs, (c.type_,), device=device
        )
    if isinstance(entry, SendOut):
        c = entry.crossing
        return Node(
            f"send/{c.stem}/to_d{index[c.target]}",
            "send",
            (c.value,),
            {"key": c.key, "source": c.source, "target": c.target},
            (),
            device=device,
        )
    empty = np.zeros((0,), dtype=np.float32)
    empty.setflags(write=False)
    return Node(
        f"token/{entry.node}", "constant", (), {"value": empty}, (_TOKEN,), (entry.node,), device
    )


def _read(value: Value, device: str, cut: Cut, index: Mapping[str, int]) -> Value:
    """``value`` as read on ``device``: itself (made there, or a placeholder fed there) or its
    Recv's output."""
    source = cut.placement[value.node]
    if source == device or value.node in cut.fed_everywhere:
        return value
    return Value(_recv_name(value, source, index))


def _recv_name(value: Value, source: str, index: Mapping[str, int]) -> str:
    return f"recv/{value.node}_{value.index}/from_d{index[source]}"
