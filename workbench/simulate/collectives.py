"""Programs for one all-reduce of one tensor, as our collectives run it.

Each builder returns ``{device: [actions]}`` for a tensor of ``nbytes`` over ``devices`` (rank
order), mirroring ``workbench/parallel/collectives`` step for step: the same messages in the
same order, the same chunks and slices, the adds on the receiving side. Adds cost
``add_seconds_per_byte`` per received byte; every action is in phase ``allreduce``. Programs
of several collectives (buckets) concatenate per device, with distinct keys.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

import numpy as np

from workbench.chunks import SLICE_BYTES, chunk_bounds
from workbench.simulate.programs import MAIN, Action, Compute, Recv, RingAllReduce, Send
from workbench.simulate.reduce_broadcast import Programs, broadcast, concat, reduce, reduce_to_one

ALLREDUCE_ALGORITHMS = ("ring", "hierarchical-copy", "reduce-to-one")
# Above this many ranks a ring is one vectorised action per rank (lockstep_ring), not some
# 5(N-1) explicit ones: the same times, but one interval per rank instead of one per message.
VECTORISE_ABOVE = 32


def ring_allreduce(
    devices: Sequence[str],
    nbytes: int,
    add_seconds_per_byte: float,
    key: str,
    *,
    itemsize: int = 4,
    slice_bytes: int = SLICE_BYTES,
    vectorised: bool | None = None,
    phase: str = "allreduce",
    stream: str = MAIN,
) -> Programs:
    """Reduce-scatter then all-gather around ``devices``, N-1 steps each.

    In step s of the reduce-scatter rank r sends chunk r-s to rank r+1 and receives chunk
    r-s-1 from rank r-1, then adds it; in the all-gather it sends chunk r+1-s and receives
    chunk r-s. A chunk travels in slices of at most ``slice_bytes``, the next slice sent
    before the current one is received. ``vectorised`` (default: above ``VECTORISE_ABOVE``
    ranks) gives each rank one :class:`RingAllReduce` action instead, with the same times.

    Examples
    --------
    >>> programs = ring_allreduce(["a", "b"], 16, 0.0, "g")
    >>> [action.key for action in programs["a"]]
    ['g/rs0/0', 'g/rs0/0', 'g/ag0/0', 'g/ag0/0']
    >>> ring_allreduce(["a", "b"], 16, 0.0, "g", vectorised=True)["b"][0].chunk_elements
    (2, 2)
    """
    elements = _elements(nbytes, itemsize)
    size = len(devices)
    if size == 1:
        return {devices[0]: []}
    slice_elements = max(1, slice_bytes // itemsize)
    chunks = tuple(hi - lo for lo, hi in chunk_bounds(elements, size))
    ring = RingAllReduce(
        tuple(devices), chunks, itemsize, slice_elements, add_seconds_per_byte, key, phase, stream
    )
    if vectorised or (vectorised is None and size > VECTORISE_ABOVE):
        return {device: [ring] for device in devices}
    return explicit_ring(ring)


def explicit_ring(ring: RingAllReduce) -> Programs:
    """The Send/Recv/Compute programs that play ``ring`` message by message, in its phase
    and on its stream: what :func:`ring_allreduce` gives with ``vectorised=False``.

    Examples
    --------
    >>> ring = RingAllReduce(("a", "b"), (1, 1), 4, 1024, 0.0, "g")
    >>> [type(action).__name__ for action in explicit_ring(ring)["b"]]
    ['Send', 'Recv', 'Send', 'Recv']
    """
    devices, size = ring.devices, len(ring.devices)
    bounds = list(pairwise(np.cumsum((0, *ring.chunk_elements)).tolist()))
    programs: Programs = {}
    for rank, device in enumerate(devices):
        step = _RingStep(
            devices[(rank + 1) % size],
            devices[(rank - 1) % size],
            ring.itemsize,
            ring.phase,
            ring.stream,
        )
        actions: list[Action] = []
        for s in range(size - 1):
            outgoing, incoming = bounds[(rank - s) % size], bounds[(rank - s - 1) % size]
            add, label = ring.add_seconds_per_byte, f"{ring.key}/rs{s}"
            actions += step.actions(label, outgoing, incoming, ring.slice_elements, add)
        for s in range(size - 1):
            outgoing, incoming = bounds[(rank + 1 - s) % size], bounds[(rank - s) % size]
            label = f"{ring.key}/ag{s}"
            actions += step.actions(label, outgoing, incoming, ring.slice_elements, 0.0)
        programs[device] = actions
    return programs


class _RingStep:
    """One step of one rank: its neighbours and how its actions are labelled."""

    def __init__(self, right: str, left: str, itemsize: int, phase: str, stream: str) -> None:
        self.right, self.left, self.itemsize = right, left, itemsize
        self.phase, self.stream = phase, stream

    def actions(
        self,
        key: str,
        outgoing: tuple[int, int],
        incoming: tuple[int, int],
        slice_elements: int,
        add_seconds_per_byte: float,
    ) -> list[Action]:
        sends = _slice_lengths(outgoing, slice_elements)
        receives = _slice_lengths(incoming, slice_elements)
        actions: list[Action] = [self._send(f"{key}/0", sends[0])]
        for index, length in enumerate(receives):
            if index + 1 < len(sends):
                actions.append(self._send(f"{key}/{index + 1}", sends[index + 1]))
            actions.append(Recv(self.left, f"{key}/{index}", self.phase, self.stream))
            seconds = length * self.itemsize * add_seconds_per_byte
            if seconds > 0:
                actions.append(Compute(seconds, "add", self.phase, self.stream))
        return actions

    def _send(self, key: str, elements: int) -> Send:
        return Send(self.right, elements * self.itemsize, key, self.phase, self.stream)


def _slice_lengths(bounds: tuple[int, int], slice_elements: int) -> list[int]:
    """A chunk's slices (an empty chunk is one empty slice, as the real ring sends it)."""
    lo, hi = bounds
    return [min(slice_elements, hi - start) for start in range(lo, hi, slice_elements)] or [0]


def hierarchical_allreduce(
    groups: Sequence[Sequence[str]],
    nbytes: int,
    add_seconds_per_byte: float,
    key: str,
    *,
    itemsize: int = 4,
    slice_bytes: int = SLICE_BYTES,
    vectorised: bool | None = None,
    phase: str = "allreduce",
    stream: str = MAIN,
) -> Programs:
    """Reduce inside each group to its leader (its first member), a ring among the leaders in
    group order, then each leader broadcasts inside its group (``hierarchical.py``: keys
    ``{key}/local``, ``{key}/leaders``, ``{key}/spread``).

    Examples
    --------
    >>> programs = hierarchical_allreduce([["a", "b"], ["c", "d"]], 16, 0.0, "g")
    >>> [getattr(action, "key") for action in programs["b"]]
    ['g/local/reduce', 'g/spread/broadcast']
    """
    labels = {"phase": phase, "stream": stream}
    local = [reduce(g, nbytes, add_seconds_per_byte, f"{key}/local", **labels) for g in groups]
    ring = ring_allreduce(
        [group[0] for group in groups],
        nbytes,
        add_seconds_per_byte,
        f"{key}/leaders",
        itemsize=itemsize,
        slice_bytes=slice_bytes,
        vectorised=vectorised,
        **labels,
    )
    spread = [broadcast(g, nbytes, f"{key}/spread", **labels) for g in groups]
    return concat(*local, ring, *spread)


def allreduce(
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
    >>> programs = allreduce(["a", "b", "c"], 8, 0.0, "g")  # 2 elements, 3 ranks
    >>> programs["b"][0].key
    'g/reduce'
    """
    if algorithm not in ALLREDUCE_ALGORITHMS:
        raise ValueError(
            f"unknown all-reduce algorithm {algorithm!r}; one of {ALLREDUCE_ALGORITHMS}"
        )
    labels = {"phase": phase, "stream": stream}
    if _elements(nbytes, itemsize) < len(devices) or algorithm == "reduce-to-one":
        return reduce_to_one(devices, nbytes, add_seconds_per_byte, key, **labels)
    sized = {"itemsize": itemsize, "vectorised": vectorised, **labels}
    if algorithm == "ring":
        return ring_allreduce(devices, nbytes, add_seconds_per_byte, key, **sized)
    if groups is None or sorted(d for g in groups for d in g) != sorted(devices):
        raise ValueError("hierarchical-copy needs groups that partition the devices")
    return hierarchical_allreduce(groups, nbytes, add_seconds_per_byte, key, **sized)


def _elements(nbytes: int, itemsize: int) -> int:
    if nbytes < 0 or nbytes % itemsize:
        raise ValueError(f"a tensor of {nbytes} bytes is not whole {itemsize}-byte elements")
    return nbytes // itemsize
