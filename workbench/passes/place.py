"""Placement: give every node a device, as the TF master's placer does.

Order of authority: (1) explicit constraints written in model code (``with
builder.device("/task:1")``), matched by their most specific parts against the real device names
and refused if they name no device; (2) colocation: a variable's updates, and any node that
reads a variable only to feed its update, go where the variable lives, and backward nodes go
where their forward node went (TF's ``colocate_gradients_with_ops``); (3) the rest by a simple
greedy cost model: in topological order, each node goes to the device where it would finish
first, counting the device's queued work, the op's estimated time (FLOPs / device rate) and the
time to bring each input from another device (latency + bytes / bandwidth).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from workbench.ir.graph import Graph, Node

COLOCATED_WITH_VARIABLE = ("apply_sgd", "apply_momentum", "apply_adam", "assign")


class PlacementError(ValueError):
    """A device constraint that names no device (lists the devices there are)."""


@dataclass(frozen=True)
class CostModel:
    """Seconds for ops and transfers, from static constants: ~90 GFLOP/s (single-thread sgemm
    on the 2-core development machine) and ~2.2 GB/s between Dask workers (64 MB transfers),
    plus a fixed 2 ms per message, which was Dask's comms before the shared-memory channels
    and is now only a pessimistic bound (docs/architecture.md, "What Dask costs"). The placer
    needs their ratios, not their exact values; calibrated figures would replace them."""

    flops_per_second: float = 90e9
    bytes_per_second: float = 2.2e9
    latency: float = 2e-3

    def op_seconds(self, graph: Graph, node: Node) -> float:
        return estimate_flops(graph, node) / self.flops_per_second

    def transfer_seconds(self, nbytes: int) -> float:
        return self.latency + nbytes / self.bytes_per_second


def estimate_flops(graph: Graph, node: Node) -> float:
    """Rough FLOPs of one node: exact for matmul and conv, one per output element otherwise."""
    inputs = [graph.type_of(value) for value in node.inputs]
    out = sum(t.size for t in node.types)
    if node.op == "matmul":
        return 2.0 * out * inputs[0].shape[-1]
    if node.op in ("conv2d", "conv2d_input_grad", "conv2d_filter_grad"):
        weights = inputs[1] if node.op != "conv2d_filter_grad" else node.types[0]
        return 2.0 * max(out, inputs[0].size) * int(np.prod(weights.shape[1:]))
    return float(max(out, 1))


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


def place(graph: Graph, devices: Sequence[str], cost: CostModel | None = None) -> Graph:
    """A copy of ``graph`` with ``device`` set on every node."""
    cost = cost or CostModel()
    chosen: dict[str, str] = {}
    for node in graph.nodes:
        if node.device is not None:
            try:
                chosen[node.name] = resolve_device(node.device, devices)
            except PlacementError as error:
                raise PlacementError(f"node {node.name!r}: {error}") from None
    # Colocation, as TF's colocate_gradients_with_ops: autodiff names each backward node
    # "gradients/<forward node>/...", and it runs where that forward node runs.
    for node in graph.nodes:
        if node.name.startswith("gradients/") and node.name not in chosen:
            parts = node.name.split("/")[1:]
            for end in range(len(parts) - 1, 0, -1):
                forward = "/".join(parts[:end])
                if forward in chosen:
                    chosen[node.name] = chosen[forward]
                    break
    # Colocation: an update runs where its variable lives (its first input is the read).
    for node in graph.nodes:
        if node.op in COLOCATED_WITH_VARIABLE and node.inputs[0].node in chosen:
            chosen.setdefault(node.name, chosen[node.inputs[0].node])
    ready_at = dict.fromkeys(devices, 0.0)
    finish: dict[str, float] = {}
    for node in graph.nodes:
        arrival = {}
        for device in devices:
            time = ready_at[device]
            for value in node.inputs:
                source = chosen[value.node]
                moved = (
                    0.0 if source == device else cost.transfer_seconds(graph.type_of(value).nbytes)
                )
                time = max(time, finish[value.node] + moved)
            arrival[device] = time
        if node.name not in chosen:
            if node.op in COLOCATED_WITH_VARIABLE:
                chosen[node.name] = chosen[node.inputs[0].node]
            else:
                # Earliest finish; ties go to the lowest device, so placement is deterministic.
                chosen[node.name] = min(devices, key=lambda d: (arrival[d], devices.index(d)))
        device = chosen[node.name]
        finish[node.name] = arrival[device] + cost.op_seconds(graph, node)
        ready_at[device] = finish[node.name]
    return graph.with_nodes(node.replace(device=chosen[node.name]) for node in graph.nodes)
