"""A calibration: what was measured on a cluster's devices, as plain data (no clocks, no I/O).

- ``op_seconds[device][signature]``: the median time of one node of that signature
  (:func:`workbench.costs.op_costs.op_signature`) on that device;
- ``links[(source, destination)]``: latency and bandwidth fitted to timed one-way sends of
  several sizes over the transport the run uses (:func:`fit_link`); ``link_sizes``: those
  sizes (links fitted to other sizes are measured again);
- ``collectives[key]``: latency and bandwidth fitted to whole all-reduces as a replica runs
  them (its communication thread, the peer transport), and to a parameter-server worker's
  pulls and pushes as it runs them, keyed by :func:`collective_key`; ``compute_stretch[key]``:
  how much longer a worker computes while that exchange runs beside it;
- ``add_bytes_per_second[device]``: how fast the device adds a received tensor into its own
  (the arithmetic of a reduction);
- ``dispatch_seconds``: one round of Dask tasks, one per device, submitted and gathered (what
  the client pays per dispatched chunk of steps);
- ``step_overhead_seconds[device]``: what a step costs beyond its nodes (feeding the batch,
  recording events), measured as a timed step minus the sum of its timed nodes;
- ``step_variation[device][graph]``: a whole run of a graph
  (:func:`workbench.costs.op_costs.graph_signature`): its spread over its median (synchronous
  replicas each wait for the slowest).

The measuring is done by :mod:`workbench.calibration.probe`; this module fits, merges
and stores, and is tested with literal numbers.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class LinkFit:
    """A transfer of ``n`` bytes takes ``latency + n / bandwidth`` seconds.

    Examples
    --------
    >>> LinkFit(latency=1e-4, bandwidth=1e9).seconds(1_000_000)
    0.0011
    """

    latency: float
    bandwidth: float

    def seconds(self, nbytes: int) -> float:
        return self.latency + nbytes / self.bandwidth


def fit_link(samples: Sequence[tuple[int, float]]) -> LinkFit:
    """Least-squares latency and bandwidth from ``(bytes, seconds)`` one-way transfer samples
    (at least two sizes). A negative intercept (noise at small sizes) is clamped to the
    smallest sample's share of time that bandwidth does not explain, never below zero.

    Examples
    --------
    >>> fit = fit_link([(0, 1e-4), (1_000_000, 1.1e-3), (2_000_000, 2.1e-3)])
    >>> round(fit.latency, 6), round(fit.bandwidth / 1e9, 3)
    (0.0001, 1.0)
    """
    sizes = np.array([float(size) for size, _ in samples])
    seconds = np.array([float(time) for _, time in samples])
    if len(set(sizes.tolist())) < 2:
        raise ValueError("fit_link needs transfers of at least two sizes")
    slope, intercept = np.polyfit(sizes, seconds, 1)
    slope = max(float(slope), 1e-15)  # at most 1 PB/s: a flat fit still moves bytes
    if intercept < 0:
        intercept = max(0.0, float(np.min(seconds - slope * sizes)))
    return LinkFit(latency=float(intercept), bandwidth=1.0 / slope)


def link_key(source: str, destination: str, wire: str = "peer") -> str:
    """How a link is stored: ``wire`` is ``peer`` (the transport of collectives and
    Send/Recv) or ``rpc`` (Dask's RPCs, which parameter servers answer).

    Examples
    --------
    >>> link_key("a", "b"), link_key("a", "b", "rpc")
    ('a -> b', 'a -> b [rpc]')
    """
    return f"{source} -> {destination}" + ("" if wire == "peer" else f" [{wire}]")


# A send between neighbouring stages of a mesh, timed with both stages and the mesh's other
# devices computing (workbench.calibration.mesh_groups_probe), stored like a collective over
# its two devices.
STAGE_HANDOFF = "stage-handoff"
# A tensor group's all-reduce of partial results, timed with each rank computing before it and
# every tensor group at once (workbench.calibration.mesh_groups_probe): a ring over the group,
# stored apart from a data group's ``ring`` (a gradient bucket's, timed without compute between).
TENSOR_ALLREDUCE = "tensor-allreduce"


def collective_key(
    algorithm: str, devices: Sequence[str], groups: Sequence[Sequence[str]] | None = None
) -> str:
    """How a measured all-reduce is stored: its algorithm, its devices in rank order and, for
    a hierarchical one, its groups.

    Examples
    --------
    >>> collective_key("ring", ["a", "b"])
    'ring over a,b'
    >>> collective_key("hierarchical-copy", ["a", "b", "c", "d"], [["a", "b"], ["c", "d"]])
    'hierarchical-copy over a,b,c,d in a,b|c,d'
    """
    key = f"{algorithm} over {','.join(devices)}"
    if algorithm == "hierarchical-copy" and groups:
        key += " in " + "|".join(",".join(group) for group in groups)
    return key


@dataclass
class Calibration:
    """Measured costs of one cluster (its ``signature`` says which: see
    :func:`workbench.calibration.probe.cluster_signature`)."""

    signature: str
    devices: tuple[str, ...]
    op_seconds: dict[str, dict[str, float]] = field(default_factory=dict)
    links: dict[str, LinkFit] = field(default_factory=dict)
    collectives: dict[str, LinkFit] = field(default_factory=dict)
    # How much longer a step's compute takes while its exchange runs beside it as in the run
    # (a parameter-server worker's gradients while the shards answer the other workers),
    # over the same compute alone; keyed like the exchange, by :func:`collective_key`.
    compute_stretch: dict[str, float] = field(default_factory=dict)
    link_sizes: tuple[int, ...] = ()
    add_bytes_per_second: dict[str, float] = field(default_factory=dict)
    step_overhead_seconds: dict[str, float] = field(default_factory=dict)
    step_variation: dict[str, dict[str, float]] = field(default_factory=dict)
    dispatch_seconds: float = 0.0
    measured_seconds: float = 0.0  # what measuring cost, summed over calibrations merged
    # Which host each device is on and how many cores each host gives its processes: devices
    # of one CPU host share them (a step's compute stretches when processes outnumber cores).
    device_hosts: dict[str, str] = field(default_factory=dict)
    host_cores: dict[str, float] = field(default_factory=dict)
    # Each device's network address (a Dask worker's host): what groups devices by host for a
    # hierarchical all-reduce (several addresses may share one machine's cores).
    device_addresses: dict[str, str] = field(default_factory=dict)

    def missing_signatures(self, device: str, signatures: Iterable[str]) -> list[str]:
        """The signatures ``device`` has no time for yet (what a cached calibration still
        has to measure for a new model or batch size)."""
        known = self.op_seconds.get(device, {})
        return sorted({s for s in signatures if s not in known})

    def has_measured(self, key: str) -> bool:
        """Whether a strategy's own exchange under ``key`` (:func:`collective_key`) was
        timed: a collective's fit, or a compute stretch beside an exchange."""
        return key in self.collectives or key in self.compute_stretch

    def has_wire(self, wire: str) -> bool:
        """Whether any link of this kind (``peer``, ``rpc``, ``ring``) was measured."""
        suffix = "" if wire == "peer" else f" [{wire}]"
        return any(key.endswith(suffix) and ("[" not in key or suffix) for key in self.links)

    def link(self, source: str, destination: str, wire: str = "peer") -> LinkFit | None:
        return self.links.get(link_key(source, destination, wire))

    def merged(self, newer: Calibration) -> Calibration:
        """This calibration with ``newer``'s measurements added (``newer`` wins on overlap)."""
        return Calibration(
            signature=self.signature,
            devices=tuple(dict.fromkeys((*self.devices, *newer.devices))),
            op_seconds=_merged_per_device(self.op_seconds, newer.op_seconds),
            links={**self.links, **newer.links},
            collectives={**self.collectives, **newer.collectives},
            compute_stretch={**self.compute_stretch, **newer.compute_stretch},
            # The sizes every link was fitted to (links fitted to more sizes are fitted to
            # these as well).
            link_sizes=_common_sizes(self, newer),
            add_bytes_per_second={**self.add_bytes_per_second, **newer.add_bytes_per_second},
            step_overhead_seconds={**self.step_overhead_seconds, **newer.step_overhead_seconds},
            step_variation=_merged_per_device(self.step_variation, newer.step_variation),
            dispatch_seconds=newer.dispatch_seconds or self.dispatch_seconds,
            measured_seconds=self.measured_seconds + newer.measured_seconds,
            device_hosts={**self.device_hosts, **newer.device_hosts},
            host_cores={**self.host_cores, **newer.host_cores},
            device_addresses={**self.device_addresses, **newer.device_addresses},
        )

    def to_json(self) -> str:
        return json.dumps(
            {
                "signature": self.signature,
                "devices": list(self.devices),
                "op_seconds": self.op_seconds,
                "links": {key: [fit.latency, fit.bandwidth] for key, fit in self.links.items()},
                "collectives": {
                    key: [fit.latency, fit.bandwidth] for key, fit in self.collectives.items()
                },
                "compute_stretch": self.compute_stretch,
                "link_sizes": list(self.link_sizes),
                "add_bytes_per_second": self.add_bytes_per_second,
                "step_overhead_seconds": self.step_overhead_seconds,
                "step_variation": self.step_variation,
                "dispatch_seconds": self.dispatch_seconds,
                "measured_seconds": self.measured_seconds,
                "device_hosts": self.device_hosts,
                "host_cores": self.host_cores,
                "device_addresses": self.device_addresses,
            },
            indent=1,
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> Calibration:
        """Examples
        --------
        >>> c = Calibration("sig", ("a", "b"), {"a": {"relu(4:float32)": 1e-6}},
        ...                 {link_key("a", "b"): LinkFit(1e-4, 1e9)}, dispatch_seconds=0.002)
        >>> Calibration.from_json(c.to_json()) == c
        True
        """
        data: Mapping = json.loads(text)
        return cls(
            signature=data["signature"],
            devices=tuple(data["devices"]),
            op_seconds={d: dict(times) for d, times in data["op_seconds"].items()},
            links={key: LinkFit(*pair) for key, pair in data["links"].items()},
            collectives={key: LinkFit(*pair) for key, pair in data.get("collectives", {}).items()},
            compute_stretch=dict(data.get("compute_stretch", {})),
            link_sizes=tuple(data.get("link_sizes", ())),
            add_bytes_per_second=dict(data["add_bytes_per_second"]),
            step_overhead_seconds=dict(data.get("step_overhead_seconds", {})),
            step_variation={d: dict(v) for d, v in data.get("step_variation", {}).items()},
            dispatch_seconds=float(data["dispatch_seconds"]),
            measured_seconds=float(data.get("measured_seconds", 0.0)),
            device_hosts=dict(data.get("device_hosts", {})),
            host_cores={host: float(cores) for host, cores in data.get("host_cores", {}).items()},
            device_addresses=dict(data.get("device_addresses", {})),
        )


def _merged_per_device(older: Mapping, newer: Mapping) -> dict[str, dict[str, float]]:
    merged = {device: dict(values) for device, values in older.items()}
    for device, values in newer.items():
        merged.setdefault(device, {}).update(values)
    return merged


def _common_sizes(older: Calibration, newer: Calibration) -> tuple[int, ...]:
    fitted = [c.link_sizes for c in (older, newer) if c.links]
    if not fitted:
        return newer.link_sizes or older.link_sizes
    return tuple(sorted(set(fitted[0]).intersection(*fitted[1:])))
