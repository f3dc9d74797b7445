"""``--what-if-cluster`` text to a :class:`ClusterDescription`.

The text is comma-separated: an optional preset name first, then ``field=value`` items that
set or override fields::

    hosts=16,gpus-per-host=8,intra=nvlink:300GB/s,inter=200Gb/s
    dgx-h100,hosts=32
    hosts=4,gpus-per-host=8,gpu=a100,intra=nvlink:300GB/s@2us,inter=ib:200Gb/s@5us

A link is ``[medium:]BANDWIDTH[@LATENCY]``; without a latency, the medium's typical one (or,
unlabelled, 3 us inside a host and 10 us between hosts). Bandwidths are decimal: 1 GB/s is
1e9 bytes/s, 1 Gb/s is 1e9 bits/s.
"""

from __future__ import annotations

import re
from dataclasses import replace

from workbench.simulate.clusters import DEVICES, PRESETS, ClusterDescription
from workbench.simulate.links import Link

FIELDS = ("hosts", "gpus-per-host", "cpus-per-host", "gpu", "intra", "inter")
BANDWIDTH_UNITS = {"TB/s": 1e12, "GB/s": 1e9, "Gb/s": 1e9 / 8, "MB/s": 1e6, "Mb/s": 1e6 / 8}
TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
MEDIUM_LATENCY = {
    "nvlink": 3e-6,
    "pcie": 5e-6,
    "ib": 5e-6,
    "roce": 8e-6,
    "ethernet": 30e-6,
    "tcp": 50e-6,
    "shm": 20e-6,
}
DEFAULT_LATENCY = {"intra": 3e-6, "inter": 10e-6}
# An unused link: the hosts=1 cluster has no inter-host pair, one device per host no intra.
UNUSED = Link(0.0, float("inf"), "unused")

_NUMBER = r"(\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_LINK = re.compile(
    rf"^(?:(?P<medium>[a-z]+):)?(?P<bandwidth>{_NUMBER})(?P<unit>[A-Za-z]+/s)"
    rf"(?:@(?P<latency>{_NUMBER})(?P<time>[a-zµ]+))?$"
)


def parse_cluster(text: str) -> ClusterDescription:
    """The cluster ``text`` describes, named by the text; ``ValueError`` names the field at
    fault and what it allows.

    Examples
    --------
    >>> cluster = parse_cluster("hosts=16,gpus-per-host=8,intra=nvlink:300GB/s,inter=200Gb/s")
    >>> cluster.size, cluster.inter.bandwidth, cluster.inter.latency, cluster.device.name
    (128, 25000000000.0, 1e-05, 'NVIDIA H100 SXM5 80GB')
    >>> parse_cluster("dgx-a100,hosts=4,inter=ib:100Gb/s@2us").inter
    Link(latency=2e-06, bandwidth=12500000000.0, name='ib')
    >>> parse_cluster("hosts=2,gpus-per-host=8,intra=nvlink:300GB/s,inter=200Gbps")
    Traceback (most recent call last):
    ...
    ValueError: inter: '200Gbps' is not a link like 200Gb/s, ib:200Gb/s or nvlink:300GB/s@3us
    """
    items = [item.strip() for item in text.split(",")] if text.strip() else []
    if not items:
        raise ValueError(f"empty; give a preset ({', '.join(PRESETS)}) or {', '.join(FIELDS)}")
    base = None
    if "=" not in items[0]:
        name = items.pop(0)
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; presets: {', '.join(PRESETS)}")
        base = PRESETS[name]
    fields: dict[str, str] = {}
    for item in items:
        field, equals, value = item.partition("=")
        field = field.strip()
        if not equals or field not in FIELDS:
            raise ValueError(
                f"{item!r} is not FIELD=VALUE with a known field; fields: {', '.join(FIELDS)}"
                + ("" if base else f" (or a preset first: {', '.join(PRESETS)})")
            )
        if field in fields:
            raise ValueError(f"{field}: given twice")
        fields[field] = value.strip()
    return replace(_build(base, fields), name=text.strip())


def _build(base: ClusterDescription | None, fields: dict[str, str]) -> ClusterDescription:
    if "gpus-per-host" in fields and "cpus-per-host" in fields:
        raise ValueError("gpus-per-host, cpus-per-host: give one of them")
    if "cpus-per-host" in fields and "gpu" in fields:
        raise ValueError("gpu: not with cpus-per-host (its devices are CPUs)")
    count_field = "cpus-per-host" if "cpus-per-host" in fields else "gpus-per-host"
    if base is None:
        missing = [f for f in ("hosts", count_field) if f not in fields]
        if missing:
            raise ValueError(
                f"{', '.join(missing)}: missing; give them or start from a preset "
                f"({', '.join(PRESETS)})"
            )
    hosts = _count(fields, "hosts", base.hosts if base else 1)
    per_host = _count(fields, count_field, base.devices_per_host if base else 1)
    device = base.device if base else DEVICES["h100"]
    if "cpus-per-host" in fields:
        device = DEVICES["cpu"]
    if "gpu" in fields:
        gpus = [name for name, d in DEVICES.items() if d.kind == "gpu"]
        if fields["gpu"] not in gpus:
            raise ValueError(f"gpu: unknown {fields['gpu']!r}; one of {', '.join(gpus)}")
        device = DEVICES[fields["gpu"]]
    links = {}
    for field, needed in (("intra", per_host > 1), ("inter", hosts > 1)):
        if field in fields:
            links[field] = parse_link(fields[field], DEFAULT_LATENCY[field], field)
        elif base is not None:
            links[field] = getattr(base, field)
        elif needed:
            raise ValueError(f"{field}: missing; a link like nvlink:300GB/s or 200Gb/s@5us")
        else:
            links[field] = UNUSED
    return ClusterDescription(hosts, per_host, device, links["intra"], links["inter"])


def _count(fields: dict[str, str], field: str, default: int) -> int:
    if field not in fields:
        return default
    value = fields[field]
    if not value.isdigit() or int(value) < 1:
        raise ValueError(f"{field}: {value!r} is not a whole number >= 1")
    return int(value)


def parse_link(text: str, default_latency: float, field: str = "link") -> Link:
    """``[medium:]BANDWIDTH[@LATENCY]`` as a :class:`Link`.

    Examples
    --------
    >>> parse_link("nvlink:450GB/s", 1e-5)
    Link(latency=3e-06, bandwidth=450000000000.0, name='nvlink')
    >>> parse_link("25Gb/s@40us", 1e-5).bandwidth
    3125000000.0
    """
    match = _LINK.match(text)
    if match is None:
        raise ValueError(
            f"{field}: {text!r} is not a link like 200Gb/s, ib:200Gb/s or nvlink:300GB/s@3us"
        )
    medium, unit, time = match["medium"], match["unit"], match["time"]
    if medium is not None and medium not in MEDIUM_LATENCY:
        raise ValueError(f"{field}: unknown medium {medium!r}; one of {', '.join(MEDIUM_LATENCY)}")
    if unit not in BANDWIDTH_UNITS:
        raise ValueError(f"{field}: unknown unit {unit!r}; one of {', '.join(BANDWIDTH_UNITS)}")
    bandwidth = float(match["bandwidth"]) * BANDWIDTH_UNITS[unit]
    if match["latency"] is None:
        latency = MEDIUM_LATENCY[medium] if medium else default_latency
    elif time not in TIME_UNITS:
        raise ValueError(f"{field}: unknown time unit {time!r}; one of {', '.join(TIME_UNITS)}")
    else:
        latency = float(match["latency"]) * TIME_UNITS[time]
    if bandwidth <= 0:
        raise ValueError(f"{field}: the bandwidth must be > 0")
    return Link(latency, bandwidth, medium or "")
