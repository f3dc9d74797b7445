"""Ring all-reduce: reduce-scatter, then all-gather, N-1 steps each (Patarasuk & Yuan 2009;
the algorithm Baidu brought to deep learning and Horovod/NCCL use).

Each rank talks only to its ring neighbours and sends 2(N-1)/N of the tensor in total, which is
bandwidth-optimal. Ranks must call with the same key and equally shaped arrays. The two halves
are functions of their own (:func:`ring_reduce_scatter`, :func:`ring_all_gather`): sharded data
parallelism runs them apart, each rank keeping the chunk it owns in between
(:func:`owned_chunk`).

Each step's chunk travels in slices of ``SLICE_BYTES``, the next slice sent before the current
one is received (NCCL pipelines its ring the same way); how the tensor is cut is
:mod:`workbench.chunks`, which the ring's simulation cuts by too. ``dtrain bench allreduce``
measures it against its bound (docs/benchmarks.md).
"""

from __future__ import annotations

from typing import Any

from workbench.chunks import SLICE_BYTES, chunk_bounds
from workbench.runtime.devices import array_namespace
from workbench.runtime.transport import Transport, recv_into


def ring_allreduce(transport: Transport, array: Any, key: str, inplace: bool = False) -> Any:
    """Sum ``array`` over all ranks; every rank gets bit-identical bytes back: the
    reduce-scatter half (:func:`ring_reduce_scatter`), then the all-gather half
    (:func:`ring_all_gather`).

    Examples
    --------
    >>> import numpy as np, threading
    >>> from workbench.runtime.transport import ThreadTransport
    >>> ranks = ThreadTransport.group(3)
    >>> out = [None] * 3
    >>> def work(r):
    ...     out[r] = ring_allreduce(ranks[r], np.full(5, float(r + 1)), "g")
    >>> threads = [threading.Thread(target=work, args=(r,)) for r in range(3)]
    >>> for t in threads: t.start()
    >>> for t in threads: t.join()
    >>> out[0]
    array([6., 6., 6., 6., 6.])
    """
    if transport.size == 1:
        return array.copy()
    flat = ring_reduce_scatter(transport, array, key, inplace=inplace)
    return ring_all_gather(transport, flat, key).reshape(array.shape)


def owned_chunk(rank: int, size: int) -> int:
    """The chunk (of :func:`~workbench.chunks.chunk_bounds`) whose complete sum rank ``rank``
    of ``size`` holds after :func:`ring_reduce_scatter`, and which it hands on first in
    :func:`ring_all_gather`.

    Examples
    --------
    >>> [owned_chunk(rank, 4) for rank in range(4)]
    [1, 2, 3, 0]
    """
    return (rank + 1) % size


def ring_reduce_scatter(transport: Transport, array: Any, key: str, inplace: bool = False) -> Any:
    """The ring's first half: a flat buffer of ``array``'s size whose chunk
    :func:`owned_chunk` (of ``chunk_bounds(array.size, N)``) holds the sum of that chunk over
    all ranks; the other chunks hold partial sums. Each rank sends N-1 chunks.

    ``inplace``: the caller hands over a fresh contiguous buffer (a packed bucket), which the
    ring then reduces into and returns.

    Examples
    --------
    >>> import numpy as np, threading
    >>> from workbench.runtime.transport import ThreadTransport
    >>> ranks = ThreadTransport.group(2)
    >>> out = [None] * 2
    >>> def work(r):
    ...     out[r] = ring_reduce_scatter(ranks[r], np.full(4, float(r + 1)), "g")
    >>> threads = [threading.Thread(target=work, args=(r,)) for r in range(2)]
    >>> for t in threads: t.start()
    >>> for t in threads: t.join()
    >>> out[0][2:], out[1][:2]  # rank 0 owns chunk 1, rank 1 owns chunk 0
    (array([3., 3.]), array([3., 3.]))
    """
    size, rank = transport.size, transport.rank
    source = array.reshape(-1)
    # Otherwise the result is a new buffer that every received chunk is written into once, as
    # (own contribution + message): no copy of the input first.
    flat = (
        source
        if inplace and array.flags.c_contiguous
        else array_namespace(source).empty_like(source)
    )
    if size == 1:
        if flat is not source:
            flat[...] = source
        return flat
    bounds = chunk_bounds(flat.size, size)
    # After step s, rank r has summed s+2 contributions into chunk (r-s-1). When it ends, rank
    # r holds the complete sum of chunk (r+1) mod N. The chunk sent first is the rank's own
    # contribution; every later one is a partial sum received before.
    for step in range(size - 1):
        outgoing = source if step == 0 else flat
        _ring_step(
            transport,
            f"{key}/rs{step}",
            [outgoing[lo:hi] for lo, hi in _slices(bounds[(rank - step) % size], flat)],
            [
                (flat[lo:hi], source[lo:hi])
                for lo, hi in _slices(bounds[(rank - step - 1) % size], flat)
            ],
        )
    return flat


def ring_all_gather(transport: Transport, flat: Any, key: str) -> Any:
    """The ring's second half, in place: each rank's chunk :func:`owned_chunk` of the flat
    buffer ``flat`` is passed once around the ring, so every rank ends with the same bytes in
    every chunk; returns ``flat``. Each rank sends N-1 chunks.

    Examples
    --------
    >>> import numpy as np, threading
    >>> from workbench.runtime.transport import ThreadTransport
    >>> ranks = ThreadTransport.group(2)
    >>> buffers = [np.array([0.0, 0.0, 7.0, 8.0]), np.array([5.0, 6.0, 0.0, 0.0])]
    >>> def work(r):
    ...     ring_all_gather(ranks[r], buffers[r], "p")
    >>> threads = [threading.Thread(target=work, args=(r,)) for r in range(2)]
    >>> for t in threads: t.start()
    >>> for t in threads: t.join()
    >>> buffers[0], buffers[1]
    (array([5., 6., 7., 8.]), array([5., 6., 7., 8.]))
    """
    size, rank = transport.size, transport.rank
    bounds = chunk_bounds(flat.size, size)
    # Each completed chunk overwrites the partial sums (or stale values) it meets, so every
    # rank ends with the same bytes (each chunk was summed exactly once, on one rank).
    for step in range(size - 1):
        _ring_step(
            transport,
            f"{key}/ag{step}",
            [flat[lo:hi] for lo, hi in _slices(bounds[(rank + 1 - step) % size], flat)],
            [(flat[lo:hi], None) for lo, hi in _slices(bounds[(rank - step) % size], flat)],
        )
    return flat


def _slices(bounds: tuple[int, int], flat: Any) -> list[tuple[int, int]]:
    """A chunk cut into slices of at most ``SLICE_BYTES``, so what a peer receives is still in
    the shared cache when it reads it."""
    lo, hi = bounds
    step = max(1, SLICE_BYTES // flat.itemsize)
    return [(start, min(start + step, hi)) for start in range(lo, hi, step)] or [(lo, hi)]


def _ring_step(transport: Transport, key: str, sends: list, receives: list) -> None:
    """Send ``sends`` to the right neighbour while receiving as many slices from the left;
    slice k+1 is on its way before slice k is received, so both directions keep moving. (Chunk
    lengths differ by at most one element, so ``sends`` has at most one slice more.)"""
    right, left = (transport.rank + 1) % transport.size, (transport.rank - 1) % transport.size
    transport.send(right, f"{key}/0", sends[0])
    for index, (out, add_to) in enumerate(receives):
        if index + 1 < len(sends):
            transport.send(right, f"{key}/{index + 1}", sends[index + 1])
        recv_into(transport, left, f"{key}/{index}", out, add_to=add_to)


def ring_bytes_per_rank(nbytes: int, size: int) -> float:
    """What each rank sends in a ring all-reduce of ``nbytes``: 2(N-1)/N x S."""
    return 2 * (size - 1) / size * nbytes
