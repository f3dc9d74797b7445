"""A ring all-reduce simulated for every rank at once, with NumPy.

The explicit program of a ring (:func:`workbench.simulate.explicit_ring.explicit_ring`) has 2 or
3 actions per rank and step, 2(N-1) steps: 4096 ranks would be some 80 million events,
minutes of Python and tens of gigabytes of intervals. But every rank
runs the same steps in the same order, each step's receive waits only on the left neighbour's
send of the same step and slice, and the link from rank r to rank r+1 carries only rank r's
sends. So processing the events step by step, slice by slice, for all ranks together is a
valid event order, and each of those rounds is a few array operations over the ranks: the
times are the same numbers, computed with the same formulas as
:mod:`workbench.simulate.plain_engine` (tests check they agree exactly).

What this does not see: anything else on the ring's links while it runs. The engine hands the
links to a ring with whatever is still queued on them, and takes them back when it ends.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class RingResult:
    """Per rank (ring order): when it finished, when its link to the right frees, bytes moved;
    ``rounds`` is how many vectorised send/receive rounds it took."""

    finish: np.ndarray
    link_free: np.ndarray
    sent: np.ndarray
    received: np.ndarray
    rounds: int


def simulate_ring(
    starts: np.ndarray,
    link_free: np.ndarray,
    latency: np.ndarray,
    bandwidth: np.ndarray,
    chunk_elements: np.ndarray,
    itemsize: int,
    slice_elements: int,
    add_seconds_per_byte: float,
    steps: range | None = None,
) -> RingResult:
    """Play a ring all-reduce: rank r starts at ``starts[r]`` and sends to rank r+1 over a link
    of ``latency[r]``, ``bandwidth[r]``, free from ``link_free[r]`` on.

    Each step mirrors ``workbench.parallel.collectives.ring``: send slice 0 of the outgoing
    chunk, then for each incoming slice k send outgoing slice k+1 (if any), receive slice k and,
    in the reduce-scatter, add it.

    Examples
    --------
    Two ranks, one 4-byte element each, a link of 1 s latency and 4 bytes/s: each step puts
    for 1 s and arrives 1 s later, two steps.

    >>> ones = np.ones(2)
    >>> result = simulate_ring(
    ...     np.zeros(2), np.zeros(2), ones, 4 * ones, np.array([1, 1]), 4, 1024, 0.0
    ... )
    >>> result.finish.tolist(), result.sent.tolist(), result.rounds
    ([4.0, 4.0], [8, 8], 2)
    """
    size = len(starts)
    ranks = np.arange(size)
    chunks = np.asarray(chunk_elements, dtype=np.int64)
    state = _RingState(
        clock=np.asarray(starts, dtype=float).copy(),
        link_free=np.asarray(link_free, dtype=float).copy(),
        latency=np.asarray(latency, dtype=float),
        bandwidth=np.asarray(bandwidth, dtype=float),
        sent=np.zeros(size, dtype=np.int64),
        received=np.zeros(size, dtype=np.int64),
    )
    whole_chunks = int(chunks.max()) <= slice_elements
    # Steps 0..N-2 are the reduce-scatter, N-1..2N-3 the all-gather (``steps``: some of them).
    for step in range(2 * (size - 1)) if steps is None else steps:
        if step < size - 1:  # reduce-scatter: send chunk r - step, add what arrives
            outgoing, add = chunks[(ranks - step) % size], add_seconds_per_byte
        else:  # all-gather: pass the completed chunks on
            outgoing, add = chunks[(ranks + 1 - (step - size + 1)) % size], None
        if whole_chunks:
            state.whole_chunk_step(outgoing * itemsize, add)
        else:
            state.sliced_step(outgoing, itemsize, slice_elements, add)
    return RingResult(state.clock, state.link_free, state.sent, state.received, state.rounds)


@dataclass
class _RingState:
    clock: np.ndarray  # when each rank's stream is free
    link_free: np.ndarray  # when each rank's link to the right is free
    latency: np.ndarray
    bandwidth: np.ndarray
    sent: np.ndarray
    received: np.ndarray
    rounds: int = 0

    def whole_chunk_step(self, nbytes: np.ndarray, add: float | None) -> None:
        """A step whose chunks are one message each: no masks needed."""
        arrival = self._send(nbytes, None)
        incoming = np.roll(nbytes, 1)
        self.clock = np.maximum(self.clock, np.roll(arrival, 1))
        self.received += incoming
        if add is not None and add > 0:
            self.clock = self.clock + incoming * add

    def sliced_step(
        self, outgoing: np.ndarray, itemsize: int, slice_elements: int, add: float | None
    ) -> None:
        """A step whose chunks travel in slices; ranks whose chunk has fewer slices sit out
        the rounds past their last one."""
        incoming = np.roll(outgoing, 1)
        # An empty chunk still travels as one empty message, as the real ring sends it.
        out_slices = np.maximum(1, -(-outgoing // slice_elements))
        in_slices = np.roll(out_slices, 1)

        def slice_bytes(chunk: np.ndarray, index: int) -> np.ndarray:
            return np.clip(chunk - index * slice_elements, 0, slice_elements) * itemsize

        arrival = self._send(slice_bytes(outgoing, 0), None)
        for index in range(int(in_slices.max())):
            ahead = out_slices > index + 1
            next_arrival = self._send(slice_bytes(outgoing, index + 1), ahead)
            receiving = in_slices > index
            nbytes = np.where(receiving, slice_bytes(incoming, index), 0)
            self.clock = np.where(
                receiving, np.maximum(self.clock, np.roll(arrival, 1)), self.clock
            )
            self.received += nbytes
            if add is not None and add > 0:
                self.clock = np.where(receiving, self.clock + nbytes * add, self.clock)
            arrival = next_arrival

    def _send(self, nbytes: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
        """Every (masked) rank puts ``nbytes`` on its link to the right; returns the arrival
        times (meaningless where masked out)."""
        self.rounds += 1
        put_end = np.maximum(self.clock, self.link_free) + nbytes / self.bandwidth
        if mask is None:
            self.clock = self.link_free = put_end
            self.sent += nbytes
        else:
            self.clock = np.where(mask, put_end, self.clock)
            self.link_free = np.where(mask, put_end, self.link_free)
            self.sent += np.where(mask, nbytes, 0)
        return put_end + self.latency


def ring_steps(size: int, part: str) -> range:
    """The steps of a ring of ``size`` ranks that ``part`` (``all``, ``reduce-scatter``,
    ``all-gather``) plays.

    Examples
    --------
    >>> ring_steps(3, "all"), ring_steps(3, "reduce-scatter"), ring_steps(3, "all-gather")
    (range(0, 4), range(0, 2), range(2, 4))
    """
    half = size - 1
    return {
        "all": range(2 * half),
        "reduce-scatter": range(half),
        "all-gather": range(half, 2 * half),
    }[part]
