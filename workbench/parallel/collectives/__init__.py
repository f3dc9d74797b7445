"""Collective algorithms over a point-to-point :class:`Transport`.

What flows in: one array per rank (same shape everywhere) and a key unique to this collective.
What flows out: the sum on every rank, bit-identical across ranks. Algorithms: ``ring``
(reduce-scatter + all-gather), ``hierarchical-copy`` (reduce in groups, ring across leaders,
broadcast) and ``reduce-to-one`` (root sums, broadcasts). Arrays with fewer elements than
ranks take the reduce-to-one path: a ring cannot give every rank a chunk. Gradient compression
(fp16, bf16, top-k, PowerSGD, loss scaling) wraps these in ``compression/``.
"""

from collections.abc import Sequence
from typing import Any

from workbench.parallel.collectives.buckets import DEFAULT_BUCKET_BYTES, Bucket, plan_buckets
from workbench.parallel.collectives.hierarchical import (
    SubgroupTransport,
    even_groups,
    hierarchical_allreduce,
)
from workbench.parallel.collectives.reduce_to_one import broadcast, reduce, reduce_to_one
from workbench.parallel.collectives.ring import chunk_bounds, ring_allreduce, ring_bytes_per_rank
from workbench.runtime.transport import StallError, ThreadTransport, Transport

ALLREDUCE_ALGORITHMS = ("ring", "hierarchical-copy", "reduce-to-one")


def allreduce(
    transport: Transport,
    array: Any,
    key: str,
    algorithm: str = "ring",
    groups: int | Sequence[Sequence[int]] = 2,
    inplace: bool = False,
) -> Any:
    """Sum ``array`` over every rank with the named algorithm (``--allreduce`` values).

    ``groups`` (hierarchical only) is a partition of the ranks, or a number of even groups.
    """
    if array.size < transport.size or algorithm == "reduce-to-one":
        return reduce_to_one(transport, array, key)
    if algorithm == "ring":
        return ring_allreduce(transport, array, key, inplace=inplace)
    if algorithm == "hierarchical-copy":
        if isinstance(groups, int):
            groups = even_groups(transport.size, groups)
        return hierarchical_allreduce(transport, array, key, groups)
    raise ValueError(f"unknown all-reduce algorithm {algorithm!r}")


__all__ = [
    "ALLREDUCE_ALGORITHMS",
    "DEFAULT_BUCKET_BYTES",
    "Bucket",
    "StallError",
    "SubgroupTransport",
    "ThreadTransport",
    "Transport",
    "allreduce",
    "broadcast",
    "chunk_bounds",
    "even_groups",
    "hierarchical_allreduce",
    "plan_buckets",
    "reduce",
    "reduce_to_one",
    "ring_allreduce",
    "ring_bytes_per_rank",
]
