"""Ring all-reduce: reduce-scatter, then all-gather, N-1 steps each (Patarasuk & Yuan 2009;
the algorithm Baidu brought to deep learning and Horovod/NCCL use).

Each rank talks only to its ring neighbours and sends 2(N-1)/N of the tensor in total, which is
bandwidth-optimal. Ranks must call with the same key and equally shaped arrays.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workbench.parallel.collectives.transport import Transport, recv_into


def chunk_bounds(length: int, parts: int) -> list[tuple[int, int]]:
    """Split ``length`` elements into ``parts`` contiguous chunks whose sizes differ by <= 1."""
    edges = np.linspace(0, length, parts + 1).round().astype(int)
    return [(int(edges[i]), int(edges[i + 1])) for i in range(parts)]


def ring_allreduce(transport: Transport, array: Any, key: str, inplace: bool = False) -> Any:
    """Sum ``array`` over all ranks; every rank gets bit-identical bytes back.

    Examples
    --------
    >>> import numpy as np, threading
    >>> from workbench.parallel.collectives.transport import ThreadTransport
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
    size, rank = transport.size, transport.rank
    if size == 1:
        return array.copy()
    source = array.reshape(-1)
    # ``inplace``: the caller hands over a fresh contiguous buffer (a packed bucket), so the
    # ring may reduce into it. Otherwise the result is a new buffer that every received chunk
    # is written into once, as (own contribution + message): no copy of the input first.
    flat = source if inplace and array.flags.c_contiguous else np.empty_like(source)
    bounds = chunk_bounds(flat.size, size)
    right, left = (rank + 1) % size, (rank - 1) % size

    # Reduce-scatter: after step s, rank r has summed s+2 contributions into chunk (r-s-1).
    # When it ends, rank r holds the complete sum of chunk (r+1) mod N. The chunk sent first
    # is the rank's own contribution; every later one is a partial sum received before.
    for step in range(size - 1):
        send_chunk = (rank - step) % size
        receive_chunk = (rank - step - 1) % size
        lo, hi = bounds[send_chunk]
        transport.send(right, f"{key}/rs{step}", (source if step == 0 else flat)[lo:hi])
        lo, hi = bounds[receive_chunk]
        recv_into(transport, left, f"{key}/rs{step}", flat[lo:hi], add_to=source[lo:hi])

    # All-gather: pass each completed chunk once around the ring, overwriting partial sums, so
    # every rank ends with the same bytes (each chunk was summed exactly once, on one rank).
    for step in range(size - 1):
        send_chunk = (rank + 1 - step) % size
        receive_chunk = (rank - step) % size
        lo, hi = bounds[send_chunk]
        transport.send(right, f"{key}/ag{step}", flat[lo:hi])
        lo, hi = bounds[receive_chunk]
        recv_into(transport, left, f"{key}/ag{step}", flat[lo:hi])
    return flat.reshape(array.shape)


def ring_bytes_per_rank(nbytes: int, size: int) -> float:
    """What each rank sends in a ring all-reduce of ``nbytes``: 2(N-1)/N x S."""
    return 2 * (size - 1) / size * nbytes
