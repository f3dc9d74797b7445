"""A ring all-reduce's time over a mesh's group, played on as few ranks as its links allow.

The mesh search prices many rings (every stage's data group and tensor group of every
configuration), some over a thousand ranks. A ring over ``n`` ranks runs ``2(n - 1)`` steps
(:mod:`workbench.simulate.lockstep_ring`): in each, every rank puts a chunk of ``1/n`` of the
tensor on the link to its right once its link is free, then waits for its left neighbour's
chunk (and, in the reduce-scatter, adds it). Ranks whose links repeat with a period ``q`` (a
group laid over hosts alike: ``q`` members per host, the last one's link leaving the host)
start alike and stay alike, so playing ``q`` ranks gives every rank's times: the same
recurrence as the lock-step simulation with chunks sent whole, on ``q`` ranks instead of ``n``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from workbench.simulate import Link


def ring_seconds(
    devices: Sequence[str],
    nbytes: int,
    itemsize: int,
    link_of: Callable[[str, str], Link],
    add_seconds_per_byte: float,
) -> float:
    """Seconds a ring all-reduce of ``nbytes`` over ``devices`` (in ring order) takes.

    Examples
    --------
    Two ranks, 8 bytes of 4-byte elements (a chunk of 4 bytes each), links of 1 s and 4
    bytes/s: two steps of 1 s put and 1 s latency.

    >>> ring_seconds(["a", "b"], 8, 4, lambda s, d: Link(1.0, 4.0), 0.0)
    4.0
    """
    size = len(devices)
    if size < 2 or nbytes <= 0:
        return 0.0
    elements = math.ceil(nbytes / itemsize)
    chunk = math.ceil(elements / size) * itemsize
    links = [link_of(devices[r], devices[(r + 1) % size]) for r in range(size)]
    period = _period([(link.latency, link.bandwidth) for link in links])
    put = [chunk / link.bandwidth for link in links[:period]]
    latency = [link.latency for link in links[:period]]
    add = chunk * add_seconds_per_byte
    clock = [0.0] * period
    link_free = [0.0] * period
    for step in range(2 * (size - 1)):
        arrival = []
        for rank in range(period):
            link_free[rank] = clock[rank] = max(clock[rank], link_free[rank]) + put[rank]
            arrival.append(clock[rank] + latency[rank])
        for rank in range(period):
            clock[rank] = max(clock[rank], arrival[rank - 1])
            if step < size - 1:
                clock[rank] += add
    return max(clock)


def _period(links: Sequence[tuple[float, float]]) -> int:
    """The shortest ``q`` dividing the ring whose links repeat every ``q`` ranks.

    Examples
    --------
    >>> _period([(1, 2), (3, 4), (1, 2), (3, 4)])
    2
    """
    size = len(links)
    for period in range(1, size + 1):
        if size % period == 0 and all(links[rank] == links[rank % period] for rank in range(size)):
            return period
    return size
