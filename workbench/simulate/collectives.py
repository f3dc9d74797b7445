"""Programs for one all-reduce of one tensor, as our collectives run it.

Each builder returns ``{device: [actions]}`` for a tensor of ``nbytes`` over ``devices`` (rank
order), mirroring ``workbench/parallel/collectives`` step for step: the same messages in the
same order, the same chunks and slices, the adds on the receiving side. Adds cost
``add_seconds_per_byte`` per received byte; every action is in phase ``allreduce`` unless
:class:`RingOptions` says otherwise. Programs of several collectives (buckets) concatenate per
device, with distinct keys.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from workbench.chunks import SLICE_BYTES, chunk_bounds
from workbench.simulate.explicit_ring import explicit_ring
from workbench.simulate.programs import (
    ALLREDUCE,
    MAIN,
    Labels,
    Programs,
    RingAllReduce,
    RingPart,
)
from workbench.simulate.reduce_broadcast import broadcast_programs, concat_programs, reduce_programs

ALLREDUCE_ALGORITHMS = ("ring", "hierarchical-copy", "reduce-to-one")
# Above this many ranks a ring is one vectorised action per rank (lockstep_ring), not some
# 5(N-1) explicit ones: the same times, but one interval per rank instead of one per message.
VECTORISE_ABOVE = 32


@dataclass(frozen=True)
class RingOptions:
    """How a ring cuts a tensor and labels its actions: ``itemsize`` bytes an element, at most
    ``slice_bytes`` a message (the real ring's slices), one :class:`RingAllReduce` action a
    rank when ``vectorised`` (default: above ``VECTORISE_ABOVE`` ranks), in ``labels``' phase
    and stream.

    Examples
    --------
    >>> RingOptions(vectorised=False).itemsize
    4
    """

    itemsize: int = 4
    slice_bytes: int = SLICE_BYTES
    vectorised: bool | None = None
    labels: Labels = ALLREDUCE
    part: RingPart = "all"  # both halves, or only the reduce-scatter or the all-gather


def ring_allreduce_programs(
    devices: Sequence[str],
    nbytes: int,
    add_seconds_per_byte: float,
    key: str,
    options: RingOptions = RingOptions(),
) -> Programs:
    """Reduce-scatter then all-gather around ``devices``, N-1 steps each.

    In step s of the reduce-scatter rank r sends chunk r-s to rank r+1 and receives chunk
    r-s-1 from rank r-1, then adds it; in the all-gather it sends chunk r+1-s and receives
    chunk r-s. A chunk travels in slices of at most ``options.slice_bytes``, the next slice
    sent before the current one is received. Vectorised (see :class:`RingOptions`), each rank
    has one :class:`RingAllReduce` action instead, with the same times.

    Examples
    --------
    >>> programs = ring_allreduce_programs(["a", "b"], 16, 0.0, "g")
    >>> [action.key for action in programs["a"]]
    ['g/rs0/0', 'g/rs0/0', 'g/ag0/0', 'g/ag0/0']
    >>> vectorised = RingOptions(vectorised=True)
    >>> ring_allreduce_programs(["a", "b"], 16, 0.0, "g", vectorised)["b"][0].chunk_elements
    (2, 2)
    """
    itemsize, vectorised, labels = options.itemsize, options.vectorised, options.labels
    elements = _elements(nbytes, itemsize)
    size = len(devices)
    if size == 1:
        return {devices[0]: []}
    slice_elements = max(1, options.slice_bytes // itemsize)
    chunks = tuple(hi - lo for lo, hi in chunk_bounds(elements, size))
    ring = RingAllReduce(
        tuple(devices),
        chunks,
        itemsize,
        slice_elements,
        add_seconds_per_byte,
        key,
        labels.phase,
        labels.stream,
        options.part,
    )
    if vectorised or (vectorised is None and size > VECTORISE_ABOVE):
        return {device: [ring] for device in devices}
    return explicit_ring(ring)


def hierarchical_allreduce_programs(
    groups: Sequence[Sequence[str]],
    nbytes: int,
    add_seconds_per_byte: float,
    key: str,
    options: RingOptions = RingOptions(),
) -> Programs:
    """Reduce inside each group to its leader (its first member), a ring among the leaders in
    group order, then each leader broadcasts inside its group (``hierarchical.py``: keys
    ``{key}/local``, ``{key}/leaders``, ``{key}/spread``).

    Examples
    --------
    >>> programs = hierarchical_allreduce_programs([["a", "b"], ["c", "d"]], 16, 0.0, "g")
    >>> [getattr(action, "key") for action in programs["b"]]
    ['g/local/reduce', 'g/spread/broadcast']
    """
    add, labels = add_seconds_per_byte, options.labels
    local = [reduce_programs(g, nbytes, add, f"{key}/local", labels=labels) for g in groups]
    leaders = [group[0] for group in groups]
    ring = ring_allreduce_programs(leaders, nbytes, add, f"{key}/leaders", options)
    spread = [broadcast_programs(g, nbytes, f"{key}/spread", labels=labels) for g in groups]
    return concat_programs(*local, ring, *spread)


def allreduce_programs(
    devices: Sequence[str],
    nbytes: int,
    add_seconds_per_byte: float,
    key: str,
    algorithm: str = "ring",
    groups: Sequence[Sequence[str]] | None = None,
    *,
    itemsize: int = 4,
    vectorised: bool | None = None,
    phase: str = "allreduce",
    stream: str = MAIN,
) -> Programs:
    """An ``--allreduce`` algorithm by name, falling back to reduce-to-one for a tensor with
    fewer elements than ranks as ``workbench.parallel.collectives.allreduce`` does.
    ``groups`` (hierarchical-copy only) partitions ``devices``, e.g. by host.

    Examples
    --------
    >>> programs = allreduce_programs(["a", "b", "c"], 8, 0.0, "g")  # 2 elements, 3 ranks
    >>> programs["b"][0].key
    'g/reduce'
    """
    if algorithm not in ALLREDUCE_ALGORITHMS:
        raise ValueError(
            f"unknown all-reduce algorithm {algorithm!r}; one of {ALLREDUCE_ALGORITHMS}"
        )
    labels = Labels(phase, stream)
    options = RingOptions(itemsize, SLICE_BYTES, vectorised, labels)
    if _elements(nbytes, itemsize) < len(devices) or algorithm == "reduce-to-one":
        return concat_programs(
            reduce_programs(devices, nbytes, add_seconds_per_byte, key, labels=labels),
            broadcast_programs(devices, nbytes, key, labels=labels),
        )
    if algorithm == "ring":
        return ring_allreduce_programs(devices, nbytes, add_seconds_per_byte, key, options)
    if groups is None or sorted(d for g in groups for d in g) != sorted(devices):
        raise ValueError("hierarchical-copy needs groups that partition the devices")
    return hierarchical_allreduce_programs(groups, nbytes, add_seconds_per_byte, key, options)


def _elements(nbytes: int, itemsize: int) -> int:
    if nbytes < 0 or nbytes % itemsize:
        raise ValueError(f"a tensor of {nbytes} bytes is not whole {itemsize}-byte elements")
    return nbytes // itemsize
