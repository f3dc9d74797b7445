"""How sharded data parallelism cuts the model's state: per fusion bucket, the ring chunk a
rank owns after the bucket's reduce-scatter is its shard of that bucket's parameters,
gradients and optimizer slots (ZeRO's partitioning on the ring's own cut, so a reduce-scatter
leaves each rank exactly the gradient shard it updates, and an all-gather hands on exactly the
shard it updated).

A shard is stored under ``shard/<bucket>`` (its slots under ``shard/<bucket>/<slot>``); the
checkpoint layout (one entry per parameter, ``<parameter>/<slot>`` per slot) is cut into
shards by :func:`shard_values` and joined back by :func:`join_shards`, so a sharded run
resumes any checkpoint and any strategy resumes a sharded run's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from workbench.chunks import chunk_bounds
from workbench.parallel.collectives.buckets import Bucket
from workbench.parallel.collectives.ring import owned_chunk

SHARD = "shard"


def shard_name(index: int) -> str:
    """The store name of bucket ``index``'s parameter shard.

    Examples
    --------
    >>> shard_name(2), f"{shard_name(2)}/momentum"
    ('shard/2', 'shard/2/momentum')
    """
    return f"{SHARD}/{index}"


@dataclass(frozen=True)
class ShardLayout:
    """The buckets of a run and how many ranks share each out.

    Examples
    --------
    >>> from workbench.parallel.collectives import plan_buckets
    >>> layout = ShardLayout(tuple(plan_buckets({"w": (10,)}, 8)), 4)
    >>> [layout.bounds(0, rank) for rank in range(4)]  # chunk (rank + 1) mod 4
    [(2, 5), (5, 8), (8, 10), (0, 2)]
    """

    buckets: tuple[Bucket, ...]
    replicas: int

    def bounds(self, index: int, rank: int) -> tuple[int, int]:
        """Rank ``rank``'s elements ``[lo, hi)`` of bucket ``index``'s flat buffer."""
        return self._chunks[index][owned_chunk(rank, self.replicas)]

    @cached_property
    def _chunks(self) -> tuple[list[tuple[int, int]], ...]:
        # Cut once: the planner asks every rank of clusters of thousands.
        return tuple(chunk_bounds(bucket.size, self.replicas) for bucket in self.buckets)

    def bucket_of(self) -> dict[str, int]:
        return {name: index for index, bucket in enumerate(self.buckets) for name in bucket.names}


def shard_values(
    layout: ShardLayout,
    rank: int,
    parameters: Mapping[str, np.ndarray],
    slots: Mapping[str, np.ndarray],
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Rank ``rank``'s shards (host arrays) of ``parameters`` and their optimizer ``slots``
    (the checkpoint layout): ``({shard/<b>: ...}, {shard/<b>/<slot>: ...})``. A scalar slot
    (Adam's step count) is the same for every parameter of a bucket, which every step updates
    together; the shard keeps the bucket's first parameter's."""
    shards: dict[str, np.ndarray] = {}
    shard_slots: dict[str, np.ndarray] = {}
    for index, bucket in enumerate(layout.buckets):
        lo, hi = layout.bounds(index, rank)
        name = shard_name(index)
        shards[name] = np.array(bucket.pack(parameters)[lo:hi], copy=True)
        first = bucket.names[0]
        for key in slots:
            if not key.startswith(f"{first}/"):
                continue
            slot = key.removeprefix(f"{first}/")
            if np.ndim(slots[key]) == 0:
                shard_slots[f"{name}/{slot}"] = np.array(slots[key], copy=True)
                continue
            packed = np.concatenate([slots[f"{n}/{slot}"].reshape(-1) for n in bucket.names])
            shard_slots[f"{name}/{slot}"] = np.array(packed[lo:hi], copy=True)
    return shards, shard_slots


def join_shards(
    layout: ShardLayout, snapshots: Sequence[Mapping[str, Mapping[str, Any]]]
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(parameters, optimizer slots) in the checkpoint layout from every rank's snapshot
    (``snapshots[rank]``: ``{"parameters": shards, "optimizer_state": shard slots}``)."""
    replicas = layout.replicas
    # Chunk c of a bucket is the shard of the rank that owns it after the reduce-scatter.
    owner = {owned_chunk(rank, replicas): rank for rank in range(replicas)}
    parameters: dict[str, np.ndarray] = {}
    slots: dict[str, np.ndarray] = {}
    for index, bucket in enumerate(layout.buckets):
        name = shard_name(index)
        flat = _joined([snapshots[owner[c]]["parameters"][name] for c in range(replicas)])
        parameters.update(bucket.unpack(flat))
        kinds = {
            key.removeprefix(f"{name}/")
            for key in snapshots[0]["optimizer_state"]
            if key.startswith(f"{name}/")
        }
        for slot in sorted(kinds):
            key = f"{name}/{slot}"
            if np.ndim(snapshots[0]["optimizer_state"][key]) == 0:
                for parameter in bucket.names:
                    slots[f"{parameter}/{slot}"] = np.array(snapshots[0]["optimizer_state"][key])
                continue
            joined = _joined([snapshots[owner[c]]["optimizer_state"][key] for c in range(replicas)])
            for parameter, value in bucket.unpack(joined).items():
                slots[f"{parameter}/{slot}"] = value
    return parameters, slots


def _joined(pieces: Sequence[Any]) -> np.ndarray:
    return np.concatenate([np.asarray(piece).reshape(-1) for piece in pieces])
