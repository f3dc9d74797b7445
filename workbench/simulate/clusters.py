"""Described clusters: hosts of identical devices, one kind of link inside a host, one between.

A what-if prediction for a machine that is not here runs the same programs over a described
cluster: its device names (``host{h}/gpu{d}``), its link model (intra-host between devices of
one host, inter-host otherwise) and its devices' peak numbers for the cost model.

Every number below is nominal: vendors' published peaks (dense FP32 FLOP/s, since the
workbench trains in float32 by default and CuPy does not use TF32 unless asked; HBM bandwidth;
NVLink per direction; one NIC per GPU), not measurements. Real steps reach a fraction of them.
Latencies are typical orders of magnitude (NVLink a few microseconds, InfiniBand ~5 us, TCP
over Ethernet tens of microseconds).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from workbench.simulate.links import Link

GiB = 2**30


@dataclass(frozen=True)
class DeviceDescription:
    """One device's nominal peaks; ``kind`` (``gpu`` or ``cpu``) is what device names say.

    Examples
    --------
    >>> DEVICES["h100"].memory_capacity_bytes // GiB
    80
    """

    name: str
    flops_per_second: float
    memory_bytes_per_second: float
    memory_capacity_bytes: int
    kind: str = "gpu"


DEVICES = {
    "h100": DeviceDescription("NVIDIA H100 SXM5 80GB", 67e12, 3.35e12, 80 * GiB),
    "h200": DeviceDescription("NVIDIA H200 SXM 141GB", 67e12, 4.8e12, 141 * GiB),
    "a100": DeviceDescription("NVIDIA A100 SXM4 80GB", 19.5e12, 2.039e12, 80 * GiB),
    "v100": DeviceDescription("NVIDIA V100 SXM2 16GB", 15.7e12, 900e9, 16 * GiB),
    # A worker on half of an 8-core laptop CPU: 4 cores x 3 GHz x 32 FP32 FLOP/cycle (two
    # AVX2 FMAs), half of dual-channel DDR5's ~50 GB/s, half of 16 GiB.
    "cpu": DeviceDescription("laptop CPU, 4 cores", 384e9, 25e9, 8 * GiB, kind="cpu"),
}


@dataclass(frozen=True)
class ClusterDescription:
    """``hosts`` x ``devices_per_host`` identical devices; ``intra`` joins two devices of one
    host, ``inter`` two of different hosts (per device: each GPU has its own NIC).

    Examples
    --------
    >>> cluster = PRESETS["dgx-h100"].with_hosts(2)
    >>> cluster.devices[7], cluster.devices[8]
    ('host0/gpu7', 'host1/gpu0')
    >>> cluster.link("host0/gpu0", "host0/gpu1").name, cluster.link("host0/gpu0", "host1/gpu0").name
    ('nvlink', 'ib')
    """

    hosts: int
    devices_per_host: int
    device: DeviceDescription
    intra: Link
    inter: Link
    name: str = "custom"

    def __post_init__(self) -> None:
        if self.hosts < 1 or self.devices_per_host < 1:
            raise ValueError("a cluster needs at least one host and one device per host")

    @property
    def size(self) -> int:
        return self.hosts * self.devices_per_host

    @property
    def devices(self) -> list[str]:
        """Every device's name, host by host: ``host{h}/{kind}{d}``."""
        kind = self.device.kind
        return [
            f"host{host}/{kind}{index}"
            for host in range(self.hosts)
            for index in range(self.devices_per_host)
        ]

    def link(self, source: str, destination: str) -> Link:
        """The link model: intra-host between devices of one host, inter-host otherwise."""
        return self.intra if host_of(source) == host_of(destination) else self.inter

    def hosts_of(self, devices: Sequence[str]) -> list[list[str]]:
        """``devices`` grouped by host (the groups of a hierarchical all-reduce)."""
        return hosts_of(devices)

    def with_hosts(self, hosts: int) -> ClusterDescription:
        """The same cluster with ``hosts`` hosts."""
        return ClusterDescription(
            hosts, self.devices_per_host, self.device, self.intra, self.inter, self.name
        )


def host_of(device: str) -> str:
    """The host part of a device name (all of it when it has no ``/``).

    Examples
    --------
    >>> host_of("host3/gpu1")
    'host3'
    """
    return device.split("/", 1)[0]


def hosts_of(devices: Sequence[str]) -> list[list[str]]:
    """``devices`` grouped by host, hosts in order of first appearance, devices in the given
    order within each.

    Examples
    --------
    >>> hosts_of(["host0/gpu0", "host1/gpu0", "host0/gpu1"])
    [['host0/gpu0', 'host0/gpu1'], ['host1/gpu0']]
    """
    groups: dict[str, list[str]] = {}
    for device in devices:
        groups.setdefault(host_of(device), []).append(device)
    return list(groups.values())


NVLINK4 = Link(3e-6, 450e9, "nvlink")  # 900 GB/s per GPU both directions, via NVSwitch
NVLINK3 = Link(3e-6, 300e9, "nvlink")  # 600 GB/s per GPU both directions
NVLINK2 = Link(3e-6, 25e9, "nvlink")  # one V100 link; some cube-mesh pairs have two
INFINIBAND_NDR = Link(5e-6, 400e9 / 8, "ib")  # one 400 Gb/s ConnectX-7 per GPU
INFINIBAND_HDR = Link(5e-6, 200e9 / 8, "ib")  # one 200 Gb/s ConnectX-6 per GPU
ETHERNET_25G = Link(30e-6, 25e9 / 8, "ethernet")  # the host's one 25 Gb/s NIC
ETHERNET_1G = Link(100e-6, 1e9 / 8, "ethernet")
SHARED_MEMORY = Link(20e-6, 10e9, "shm")  # our channel: a copy in, a FIFO line, a copy out

PRESETS = {
    "dgx-h100": ClusterDescription(1, 8, DEVICES["h100"], NVLINK4, INFINIBAND_NDR, "dgx-h100"),
    "dgx-h200": ClusterDescription(1, 8, DEVICES["h200"], NVLINK4, INFINIBAND_NDR, "dgx-h200"),
    "dgx-a100": ClusterDescription(1, 8, DEVICES["a100"], NVLINK3, INFINIBAND_HDR, "dgx-a100"),
    "cloud-8xv100-25g": ClusterDescription(
        1, 8, DEVICES["v100"], NVLINK2, ETHERNET_25G, "cloud-8xv100-25g"
    ),
    "laptop": ClusterDescription(1, 2, DEVICES["cpu"], SHARED_MEMORY, ETHERNET_1G, "laptop"),
}
