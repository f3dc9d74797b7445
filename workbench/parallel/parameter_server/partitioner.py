"""Placing variables on parameter-server shards, balanced by size.

Greedy "largest first onto the least loaded shard" (the LPT rule), so shards carry similar
bytes and therefore similar traffic. Ties break by shard index, so placement is deterministic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np


def partition_variables(shapes: Mapping[str, Sequence[int]], shards: int) -> list[list[str]]:
    """Variable names per shard (each list in the model's parameter order).

    Examples
    --------
    >>> partition_variables({"a": (100,), "b": (60,), "c": (50,), "d": (10,)}, 2)
    [['a', 'd'], ['b', 'c']]
    """
    if shards < 1:
        raise ValueError(f"--ps: needs at least one shard, got {shards}")
    loads = [0] * shards
    owner: dict[str, int] = {}
    for name in sorted(shapes, key=lambda n: -int(np.prod(shapes[n]))):
        shard = min(range(shards), key=lambda s: (loads[s], s))
        owner[name] = shard
        loads[shard] += int(np.prod(shapes[name]))
    return [[name for name in shapes if owner[name] == shard] for shard in range(shards)]
