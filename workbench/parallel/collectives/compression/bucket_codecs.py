"""Compressed all-reduce of gradient buckets: what a mirrored replica calls per bucket.

Every codec's ``reduce(flat, key, index)`` takes this replica's packed bucket ``index`` (its own
fresh buffer, which the codec may overwrite) and returns the sum over the replicas, or the
codec's approximation of it, as a dense array of the bucket's dtype, the same bytes on every
replica. The caller scales it by 1/N, as it does without compression. ``allreduce(transport,
array, key)`` is the run's dense all-reduce (``--allreduce``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from workbench.parallel.collectives.buckets import Bucket
from workbench.parallel.collectives.compression.half_precision import half_precision_allreduce
from workbench.parallel.collectives.compression.loss_scaling import DynamicLossScaler
from workbench.parallel.collectives.compression.power_sgd import (
    PowerSgdFactors,
    matrix_shape,
    worth_compressing,
)
from workbench.parallel.collectives.compression.spec import CompressionSpec
from workbench.parallel.collectives.compression.top_k import TopKSelector, sparse_allgather_sum
from workbench.runtime.devices import array_namespace
from workbench.runtime.transport import Transport

AllReduce = Callable[[Transport, Any, str], Any]


class PlainBuckets:
    """No compression: the dense all-reduce."""

    scaler: DynamicLossScaler | None = None

    def __init__(self, transport: Transport, allreduce: AllReduce) -> None:
        self.transport, self.allreduce = transport, allreduce

    def reduce(self, flat: Any, key: str, index: int) -> Any:
        return self.allreduce(self.transport, flat, key)


class HalfPrecisionBuckets(PlainBuckets):
    """fp16 / bf16 on the wire, with dynamic loss scaling: the bucket is multiplied by S
    before it is cast (the same as scaling the loss: gradients are linear in it), and the sum
    divided by S after (exact: S is a power of two). The replica feeds ``scaler`` the outcome."""

    def __init__(self, transport: Transport, allreduce: AllReduce, method: str) -> None:
        super().__init__(transport, allreduce)
        self.method = method
        self.scaler = DynamicLossScaler()

    def reduce(self, flat: Any, key: str, index: int) -> Any:
        scale = self.scaler.scale
        flat *= scale
        total = half_precision_allreduce(self.allreduce, self.transport, flat, key, self.method)
        total *= 1.0 / scale
        return total


class TopKBuckets(PlainBuckets):
    """Top-k of (bucket + residual) per bucket, all-gathered as (index, value) pairs."""

    def __init__(self, transport: Transport, allreduce: AllReduce, ratio: float) -> None:
        super().__init__(transport, allreduce)
        self.selector = TopKSelector(ratio)

    def reduce(self, flat: Any, key: str, index: int) -> Any:
        indices, values = self.selector.select(index, flat, reuse=True)
        return sparse_allgather_sum(self.transport, indices, values, flat.size, key)


class PowerSgdBuckets(PlainBuckets):
    """PowerSGD on the bucket's matrices; its vectors and tiny matrices go dense, together."""

    def __init__(
        self,
        transport: Transport,
        allreduce: AllReduce,
        rank: int,
        buckets: Sequence[Bucket],
        share: float,
        seed: int,
    ) -> None:
        super().__init__(transport, allreduce)
        self.buckets, self.share = buckets, share
        self.factors = PowerSgdFactors(rank, seed)

    def reduce(self, flat: Any, key: str, index: int) -> Any:
        bucket = self.buckets[index]
        views = bucket.unpack(flat)  # views into ``flat``: the results land in place
        compressed = [
            n
            for n, s in zip(bucket.names, bucket.shapes)
            if worth_compressing(s, self.factors.rank)
        ]
        matrices = [
            (name, views[name].reshape(matrix_shape(views[name].shape))) for name in compressed
        ]
        self.factors.allreduce(
            matrices,
            lambda array, part: self.allreduce(self.transport, array, part),
            key,
            self.share,
        )
        dense = [name for name in bucket.names if name not in compressed]
        if dense:
            xp = array_namespace(flat)
            total = self.allreduce(
                self.transport,
                xp.concatenate([views[n].reshape(-1) for n in dense]),
                f"{key}/dense",
            )
            offset = 0
            for name in dense:
                size = views[name].size
                views[name][...] = total[offset : offset + size].reshape(views[name].shape)
                offset += size
        return flat


def bucket_codec(
    spec: CompressionSpec,
    transport: Transport,
    allreduce: AllReduce,
    buckets: Sequence[Bucket],
    share: float,
    seed: int,
) -> PlainBuckets:
    """The codec of ``spec`` for a replica with ``buckets``; ``share`` is 1/N."""
    if spec.half_precision:
        return HalfPrecisionBuckets(transport, allreduce, spec.method)
    if spec.method == "topk":
        return TopKBuckets(transport, allreduce, spec.ratio)
    if spec.method == "powersgd":
        return PowerSgdBuckets(transport, allreduce, spec.rank, buckets, share, seed)
    return PlainBuckets(transport, allreduce)
