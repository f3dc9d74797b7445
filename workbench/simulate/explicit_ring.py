"""A ring all-reduce message by message: the Send/Recv/Compute programs that play a
:class:`~workbench.simulate.programs.RingAllReduce` as ``workbench/parallel/collectives/ring.py``
runs it, for rings small enough to show every message and for hosts whose cores the messages
share (:mod:`workbench.simulate.cores`).
"""

from __future__ import annotations

from itertools import pairwise

import numpy as np

from workbench.simulate.programs import Action, Compute, Programs, Recv, RingAllReduce, Send


def explicit_ring(ring: RingAllReduce) -> Programs:
    """The Send/Recv/Compute programs that play ``ring`` message by message, in its phase
    and on its stream: what
    :func:`~workbench.simulate.collectives.ring_allreduce_programs` gives unvectorised.

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
        for s in range(size - 1 if ring.part != "all-gather" else 0):
            outgoing, incoming = bounds[(rank - s) % size], bounds[(rank - s - 1) % size]
            add, label = ring.add_seconds_per_byte, f"{ring.key}/rs{s}"
            actions += step.actions(label, outgoing, incoming, ring.slice_elements, add)
        for s in range(size - 1 if ring.part != "reduce-scatter" else 0):
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
