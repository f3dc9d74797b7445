"""How a flat tensor is cut for the ring all-reduce: into one contiguous chunk per rank, and
each chunk into slices sent one after another. The ring itself
(:mod:`workbench.parallel.collectives.ring`) and its simulation
(:mod:`workbench.simulate.collectives`) both cut by these, so the planner's ring moves the
bytes the real one moves.
"""

from __future__ import annotations

import numpy as np

# A chunk travels in slices of at most this many bytes, the next sent before the current one
# is received, as NCCL pipelines its ring: between workers on one host the peer then reads a
# slice while it is still in the shared cache (docs/benchmarks.md, the allreduce suite).
SLICE_BYTES = 2 << 20


def chunk_bounds(length: int, parts: int) -> list[tuple[int, int]]:
    """``length`` elements in ``parts`` contiguous chunks whose sizes differ by <= 1.

    Examples
    --------
    >>> chunk_bounds(10, 4)
    [(0, 2), (2, 5), (5, 8), (8, 10)]
    """
    edges = np.linspace(0, length, parts + 1).round().astype(int)
    return [(int(edges[i]), int(edges[i + 1])) for i in range(parts)]
