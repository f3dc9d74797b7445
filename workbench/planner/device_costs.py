"""What the planner asks of a cluster, measured or described: a node's seconds on a device,
the link between two devices (for the peer transport of collectives and Send/Recv, and for the
Dask RPCs parameter servers answer), a reduction's add rate, the cost per step beyond the nodes
and the client's dispatch cost per step.

:func:`measured_costs` reads a :class:`~workbench.costs.Calibration`; devices or links it did
not measure (a parameter-server task on a cluster calibrated with workers only) take the
median of those it did, as devices of one local cluster are alike.
:func:`described_costs` reads a :class:`~workbench.simulate.ClusterDescription`: a node takes
the longer of its FLOPs at the device's peak and its bytes at the memory bandwidth (the
roofline), links are the description's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from statistics import median
from typing import Protocol

from workbench.costs import (
    CalibratedCostModel,
    Calibration,
    StaticCostModel,
    collective_key,
    estimate_bytes,
    estimate_flops,
    graph_signature,
)
from workbench.ir import Graph, Node
from workbench.parallel.step_loop import steps_per_round
from workbench.simulate import ClusterDescription, Link


class NodeCosts(Protocol):
    def node_seconds(self, graph: Graph, node: Node, device: str) -> float: ...


@dataclass(frozen=True)
class DeviceCosts:
    """Seconds for the planner (see the module docstring)."""

    cost_model: NodeCosts
    peer_links: dict[tuple[str, str], Link]
    rpc_links: dict[tuple[str, str], Link]
    default_peer: Link
    default_rpc: Link
    add_bytes_per_second: float
    step_overhead_seconds: float
    dispatch_seconds: float
    source: str  # "calibrated", "described: <name>" or "fixed rates"
    cluster: ClusterDescription | None = None  # a described cluster answers links per pair
    # CPU hosts whose cores the devices share (none: every device computes at full speed, as
    # GPUs do), and which host each measured device is on.
    host_cores: dict[str, float] = field(default_factory=dict)
    device_hosts: dict[str, str] = field(default_factory=dict)
    ring_links: dict[tuple[str, str], Link] = field(default_factory=dict)
    # Each graph's (by graph_signature) spread over its median, the median over the devices
    # that ran it (none: steps take the same time every time, as a described cluster's are
    # taken to).
    step_variations: dict[str, float] = field(default_factory=dict)
    device_addresses: dict[str, str] = field(default_factory=dict)  # measured devices' workers
    # Whole all-reduces as the replicas run them, measured (by collective_key).
    collectives: dict[str, Link] = field(default_factory=dict)
    # How much longer compute takes beside a measured exchange (by collective_key).
    compute_stretch: dict[str, float] = field(default_factory=dict)
    # Node times asked again (the same graph on every replica): answered once. A described
    # cluster's devices are alike, so its answers are shared by every device.
    _known: dict = field(default_factory=dict, compare=False, repr=False)
    _graphs: list = field(default_factory=list, compare=False, repr=False)  # ids stay unique

    def node_seconds(self, graph: Graph, node: Node, device: str) -> float:
        key = (id(graph), node.name, "" if self.cluster is not None else device)
        seconds = self._known.get(key)
        if seconds is None:
            if not any(kept is graph for kept in self._graphs[-8:]):
                self._graphs.append(graph)
            seconds = self._known[key] = self.cost_model.node_seconds(graph, node, device)
        return seconds

    def measured_collective(
        self, kind: str, devices: Sequence[str], groups: Sequence[Sequence[str]] | None = None
    ) -> Link | None:
        """The collective ``kind`` (an all-reduce algorithm, ``reduce`` or ``broadcast``, a
        parameter-server worker's ``ps-pull`` or ``ps-push``) of ``devices`` (in rank order)
        as calibration timed it, if it did."""
        return self.collectives.get(collective_key(kind, devices, groups))

    def stretch_beside(self, kind: str, devices: Sequence[str]) -> float:
        """How much longer ``devices`` compute while their exchange ``kind`` runs beside it,
        as calibration timed it (1 if it did not)."""
        return self.compute_stretch.get(collective_key(kind, devices), 1.0)

    def variation(self, graph: Graph) -> float:
        """How much a run of ``graph`` varies (spread over median): measured, else 0."""
        return self.step_variations.get(graph_signature(graph), 0.0)

    def host_of(self, device: str) -> str:
        """A device's host; a device calibration did not see (a parameter-server task on a
        cluster measured with workers only) is on the one host, if all measured ones are."""
        host = self.device_hosts.get(device)
        if host is None:
            hosts = set(self.device_hosts.values())
            host = hosts.pop() if len(hosts) == 1 else device
        return host

    def peer_link(self, source: str, destination: str) -> Link:
        if self.cluster is not None:
            return self.cluster.link(source, destination)
        return self.peer_links.get((source, destination), self.default_peer)

    def ring_link(self, source: str, destination: str) -> Link:
        """A peer link as a ring all-reduce's steps load it (sending while receiving), where
        calibration measured ring shifts; else the peer link."""
        if self.cluster is not None:
            return self.cluster.link(source, destination)
        return self.ring_links.get((source, destination)) or self.peer_link(source, destination)

    def rpc_link(self, source: str, destination: str) -> Link:
        if self.cluster is not None:
            return self.cluster.link(source, destination)
        return self.rpc_links.get((source, destination), self.default_rpc)

    def transfer_seconds(self, nbytes: int, source: str, destination: str) -> float:
        """What the placer asks: a tensor's trip over the peer link (nothing on one device).
        With :meth:`node_seconds` this makes the costs a placer's cost model."""
        if source == destination:
            return 0.0
        return self.peer_link(source, destination).seconds(nbytes)

    @property
    def add_seconds_per_byte(self) -> float:
        return 1.0 / self.add_bytes_per_second

    def dispatch_per_step(self, step_seconds: float) -> float:
        """The client's round of tasks, charged once per dispatched round of steps, which
        covers as many steps of ``step_seconds`` as the step loop gives it.

        The step loop sends each round while the one before it runs, so the devices no
        longer wait out this round trip; what they still pay is the client's CPU that the
        round trip stands for, competing with the workers for a host's cores. Charging the
        whole round keeps predictions nearest the measured step (docs/architecture/prediction.md,
        "Predicting a step: calibration, cost model, simulator")."""
        return self.dispatch_seconds / steps_per_round(step_seconds)


def _links(calibration: Calibration, wire: str) -> dict[tuple[str, str], Link]:
    found = {}
    for key, fit in calibration.links.items():
        pair, _, kind = key.partition(" [")
        if (kind.rstrip("]") or "peer") != wire:
            continue
        source, destination = pair.split(" -> ")
        found[(source, destination)] = Link(fit.latency, fit.bandwidth, wire)
    return found


def _one_network_host(calibration: Calibration) -> bool:
    """Whether the devices' workers share one address. A ring shift's time is its rank's
    send and receive together: inside a host both are copies competing for its cores, which is
    what the shifts measure; in a ring across hosts every rank sends or receives over the
    network, so each shift would charge the network's time to the host's own links too.
    There the pairs' own measured links are the truth."""
    hosts = {
        address.split("://")[-1].rsplit(":", 1)[0]
        for address in calibration.device_addresses.values()
    }
    return len(hosts) <= 1


def _median_per_graph(per_device: dict[str, dict[str, float]]) -> dict[str, float]:
    values: dict[str, list[float]] = {}
    for graphs in per_device.values():
        for graph, value in graphs.items():
            values.setdefault(graph, []).append(value)
    return {graph: median(found) for graph, found in values.items()}


def _median_link(links: dict[tuple[str, str], Link], fallback: Link) -> Link:
    if not links:
        return fallback
    return Link(
        median(link.latency for link in links.values()),
        median(link.bandwidth for link in links.values()),
        fallback.name,
    )


def measured_costs(calibration: Calibration) -> DeviceCosts:
    """Costs from a calibration (a one-device calibration has no links: fixed rates stand in,
    and no step needs them). CPU devices share their host's cores; GPUs do not."""
    cpu = all("/device:GPU" not in device for device in calibration.devices)
    peer, rpc = _links(calibration, "peer"), _links(calibration, "rpc")
    default_peer = _median_link(peer, Link(2e-3, 2.2e9, "peer"))
    return DeviceCosts(
        cost_model=CalibratedCostModel(calibration),
        peer_links=peer,
        rpc_links=rpc,
        default_peer=default_peer,
        default_rpc=_median_link(rpc, default_peer),
        add_bytes_per_second=median(calibration.add_bytes_per_second.values() or [5e9]),
        # A timed step minus its timed nodes: noise only adds to it (one busy moment on one
        # device read 16 ms), so the least any device measured is the overhead.
        step_overhead_seconds=min(calibration.step_overhead_seconds.values() or [0.0]),
        dispatch_seconds=calibration.dispatch_seconds,
        source="calibrated",
        host_cores=dict(calibration.host_cores) if cpu else {},
        device_hosts=dict(calibration.device_hosts),
        ring_links=_links(calibration, "ring") if _one_network_host(calibration) else {},
        step_variations=_median_per_graph(calibration.step_variation),
        device_addresses=dict(calibration.device_addresses),
        collectives={
            key: Link(fit.latency, fit.bandwidth, "allreduce")
            for key, fit in calibration.collectives.items()
        },
        compute_stretch=dict(calibration.compute_stretch),
    )


@dataclass(frozen=True)
class RooflineCostModel:
    """A node on a described device: the longer of compute at peak and memory traffic."""

    flops_per_second: float
    memory_bytes_per_second: float
    kernel_seconds: float = 5e-6  # a launch: what the smallest kernels cost on a GPU

    def node_seconds(self, graph: Graph, node: Node, device: str) -> float:
        if node.op in ("placeholder", "constant", "variable"):
            return 0.0
        compute = estimate_flops(graph, node) / self.flops_per_second
        memory = estimate_bytes(graph, node) / self.memory_bytes_per_second
        return self.kernel_seconds + max(compute, memory)


def described_costs(cluster: ClusterDescription) -> DeviceCosts:
    """Costs of a described cluster: roofline nodes, its intra- and inter-host links for
    every transport (a described cluster's parameter servers use the same network)."""
    device = cluster.device
    model = RooflineCostModel(device.flops_per_second, device.memory_bytes_per_second)
    default = cluster.inter if cluster.hosts > 1 else cluster.intra
    return DeviceCosts(
        cost_model=model,
        peer_links={},
        rpc_links={},
        default_peer=default,
        default_rpc=default,
        add_bytes_per_second=device.memory_bytes_per_second / 3,  # read two, write one
        step_overhead_seconds=0.0,
        dispatch_seconds=0.0,
        source=f"described: {cluster.name}",
        cluster=cluster,
    )


def fixed_costs() -> DeviceCosts:
    """Nothing measured: the placer's fixed rates and Dask's comms before the shared-memory
    channels (docs/architecture/dask-costs.md, "What Dask costs")."""
    static = StaticCostModel()
    link = Link(static.latency, static.bytes_per_second, "fixed")
    return DeviceCosts(
        cost_model=static,
        peer_links={},
        rpc_links={},
        default_peer=link,
        default_rpc=link,
        add_bytes_per_second=5e9,
        step_overhead_seconds=0.0,
        dispatch_seconds=0.0,
        source="fixed rates",
    )
