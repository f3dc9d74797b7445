"""Partition: one subgraph per device, with a Send/Recv pair on every edge the placement cuts.

Like the TF master's partitioner: a value needed on another device is sent once and received
once per destination device (however many nodes there read it), the pair sharing a rendezvous
key ``<value>-><device>``; a control edge across devices becomes a Send/Recv of an empty token.
Every node keeps its name, so a partition reads like the slice of the original graph it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from workbench.ir.graph import Graph, Node, TensorType, Value
from workbench.passes.verify import verify


class PartitionError(ValueError):
    pass


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

    def describe(self) -> str:
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
            lines.append(f"  {t.key}: {t.source} -> {t.target}, {t.nbytes:,} bytes")
        return "\n".join(lines)


def partition(graph: Graph, devices: Sequence[str]) -> Partitioned:
    """Split a placed graph (every node has a device) into per-device graphs."""
    index = {device: i for i, device in enumerate(devices)}
    nodes: dict[str, list[Node]] = {device: [] for device in devices}
    received: dict[tuple[Value, str], Value] = {}
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

    def bring(value: Value, target: str) -> Value:
        source = device_of(value.node)
        if source == target:
            return value
        if (value, target) not in received:
            key = f"{value}->{target}"
            type_ = (
                graph.type_of(value) if graph.has_node(value.node) else TensorType((0,), "float32")
            )
            stem = f"{value.node}_{value.index}"
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
            recv = Node(
                f"recv/{stem}/from_d{index[source]}",
                "recv",
                (),
                {
                    "key": key,
                    "source": source,
                    "target": target,
                    "shape": type_.shape,
                    "dtype": type_.dtype,
                },
                (type_,),
                device=target,
            )
            nodes[target].append(recv)
            received[(value, target)] = recv.output()
            transfers.append(Transfer(key, value, source, target, type_.nbytes, type_.shape))
        return received[(value, target)]

    def wait_for(name: str, target: str) -> str:
        source = device_of(name)
        if source == target:
            return name
        token = f"token/{name}"
        if not any(n.name == token for n in nodes[source]):
            empty = np.zeros((0,), dtype=np.float32)
            empty.setflags(write=False)
            nodes[source].append(
                Node(
                    token,
                    "constant",
                    (),
                    {"value": empty},
                    (TensorType((0,), "float32"),),
                    (name,),
                    source,
                )
            )
            where[token] = source
        return bring(Value(token), target).node

    for node in graph.nodes:
        device = device_of(node.name)
        inputs = tuple(bring(value, device) for value in node.inputs)
        control = tuple(wait_for(name, device) for name in node.control_inputs)
        nodes[device].append(node.replace(inputs=inputs, control_inputs=control))

    partitions = {}
    for device in devices:
        outputs = {k: v for k, v in graph.outputs.items() if device_of(v.node) == device}
        part = Graph(tuple(nodes[device]), outputs)
        verify(part, after=f"partition for {device}")
        partitions[device] = part
    return Partitioned(partitions, tuple(transfers))
