"""Partition: one subgraph per device, with a Send/Recv pair on every edge the placement cuts.

Like the TF master's partitioner: a value needed on another device is sent once and received
once per destination device (however many nodes there read it), the pair sharing a rendezvous
key ``<value>-><device>``; a control edge across devices becomes a Send/Recv of an empty token.
Every node keeps its name, so a partition reads like the slice of the original graph it is.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

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
    index = {device: i for i, device in enumerate(devices)}
    nodes: dict[str, list[Node]] = {device: [] for device in devices}
    transfers: list[Transfer] = []
    where = {node.name: node.device for node in graph.nodes}

    def device_of(name: str) -> str:
        device = where[name]
        if device not in index:
            raise PartitionError(
                f"node {name!r} is placed on {device!r}, not one of {devices}; "
                "run the place pass first"
            )
        return device

    # Which values, and which tokens, each node must send, in the order their readers need them.
    sends: dict[str, list[tuple[Value, str]]] = {}
    tokens: dict[str, list[str]] = {}
    for node in graph.nodes:
        device = device_of(node.name)
        for value in node.inputs:
            wanted = sends.setdefault(value.node, [])
            crosses = device_of(value.node) != device and value.node not in fed_everywhere
            if crosses and (value, device) not in wanted:
                wanted.append((value, device))
        for name in node.control_inputs:
            wanted_by = tokens.setdefault(name, [])
            if device_of(name) != device and device not in wanted_by:
                wanted_by.append(device)

    def send(value: Value, type_: TensorType, target: str) -> None:
        source, key, stem = where[value.node], f"{value}->{target}", f"{value.node}_{value.index}"
        nodes[source].append(
            Node(
                f"send/{stem}/to_d{index[target]}",
                "send",
                (value,),
                {"key": key, "source": source, "target": target},
                (),
                device=source,
            )
        )
        transfers.append(Transfer(key, value, source, target, type_.nbytes, type_.shape))

    made: set[tuple[str, str]] = set()

    def received(value: Value, target: str) -> Value:
        """``value`` on ``target``: itself, a copy of its placeholder, or its Recv's output."""
        source = device_of(value.node)
        if source == target:
            return value
        if value.node in fed_everywhere:
            if (value.node, target) not in made:
                made.add((value.node, target))
                nodes[target].append(graph.node(value.node).replace(device=target))
            return value
        name = f"recv/{value.node}_{value.index}/from_d{index[source]}"
        if (name, target) not in made:
            made.add((name, target))
            type_ = graph.type_of(value) if graph.has_node(value.node) else _TOKEN
            attrs = {"key": f"{value}->{target}", "source": source, "target": target}
            attrs.update(shape=type_.shape, dtype=type_.dtype)
            nodes[target].append(Node(name, "recv", (), attrs, (type_,), device=target))
        return Value(name)

    for node in graph.nodes:
        device = device_of(node.name)
        inputs = tuple(received(value, device) for value in node.inputs)
        control = tuple(
            name if device_of(name) == device else received(Value(f"token/{name}"), device).node
            for name in node.control_inputs
        )
        nodes[device].append(node.replace(inputs=inputs, control_inputs=control))
        for value, target in sends.get(node.name, ()):
            send(value, graph.type_of(value), target)
        if tokens.get(node.name):
            token = f"token/{node.name}"
            empty = np.zeros((0,), dtype=np.float32)
            empty.setflags(write=False)
            nodes[device].append(
                Node(token, "constant", (), {"value": empty}, (_TOKEN,), (node.name,), device)
            )
            where[token] = device
            for target in tokens[node.name]:
                send(Value(token), _TOKEN, target)

    partitions = {}
    for device in devices:
        outputs = {k: v for k, v in graph.outputs.items() if device_of(v.node) == device}
        part = Graph(tuple(nodes[device]), outputs)
        verify(part, after=f"partition for {device}")
        partitions[device] = part
    return Partitioned(partitions, tuple(transfers))
