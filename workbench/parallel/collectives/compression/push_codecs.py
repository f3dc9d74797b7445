"""Compressed pushes to one receiver: a worker's gradient to a parameter-server shard, or a
replica's to the storage device of central storage.

A push has one sender and one receiver, so nothing is summed on the way and every codec can
work on the sender's gradient alone:

- worker side, :class:`PushEncoder`: ``encode(key, gradient) -> Payload``, one encoder per
  worker, keeping per-``key`` (variable name) error-feedback state for ``topk`` and
  ``powersgd``;
- receiver side, :func:`decode`: ``decode(payload) -> gradient`` as a dense array of the
  gradient's shape and dtype (a shard sums or applies it as it would the dense push).

``powersgd`` here is the worker's own rank-r approximation: P (orthonormal) and Q of
(gradient + residual), one power-iteration step warm-started from the worker's previous Q.
``fp16``/``bf16`` take an optional loss ``scale`` (central storage scales, with its replicas
agreeing on S; a parameter-server push may leave it at 1: there is no step all workers agree
to skip, and float16 then overflows only for gradients beyond 65504).

:func:`send_payload` / :func:`receive_payload` move a payload over a :class:`Transport`, one
message per array; a :class:`Payload` also pickles as it is (an RPC argument).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from workbench.parallel.collectives.compression.half_precision import decode_half, encode_half
from workbench.parallel.collectives.compression.power_sgd import (
    PowerSgdFactors,
    low_rank_product,
    worth_compressing,
)
from workbench.parallel.collectives.compression.spec import CompressionSpec, parse_compression
from workbench.parallel.collectives.compression.top_k import TopKSelector, scatter_dense
from workbench.runtime.transport import Transport


@dataclass(frozen=True)
class Payload:
    """What travels for one gradient: ``method`` (how to decode; ``none`` for a tensor
    PowerSGD leaves dense), the gradient's ``shape`` and ``dtype``, the ``arrays`` sent, and
    the loss ``scale`` they carry."""

    method: str
    shape: tuple[int, ...]
    dtype: str
    arrays: tuple[Any, ...]
    scale: float = 1.0

    @property
    def nbytes(self) -> int:
        """Bytes on the wire."""
        return sum(int(array.nbytes) for array in self.arrays)


class PushEncoder:
    """A worker's encoder for ``compression`` (a ``--compression`` value or spec); ``seed``
    starts PowerSGD's Q.

    Examples
    --------
    >>> encoder = PushEncoder("topk:0.25")
    >>> payload = encoder.encode("w", np.array([0.1, -4.0, 0.2, 3.0]))
    >>> payload.arrays[0], decode(payload)
    (array([1], dtype=int32), array([ 0., -4.,  0.,  0.]))
    >>> decode(encoder.encode("w", np.zeros(4)))  # the residual's largest goes next
    array([0., 0., 0., 3.])
    """

    def __init__(self, compression: str | CompressionSpec, seed: int = 0) -> None:
        self.spec = parse_compression(compression)
        self.top_k = TopKSelector(self.spec.ratio) if self.spec.method == "topk" else None
        self.power_sgd = (
            PowerSgdFactors(self.spec.rank, seed) if self.spec.method == "powersgd" else None
        )

    def encode(self, key: str, gradient: Any, scale: float = 1.0) -> Payload:
        """The payload of ``gradient`` (any shape); ``key`` names its error-feedback state."""
        method = self.spec.method
        payload = Payload(method, tuple(gradient.shape), str(gradient.dtype), ())
        if self.spec.half_precision:
            arrays = (encode_half(gradient * scale, method),)
            return replace(payload, arrays=arrays, scale=scale)
        if method == "topk":
            return replace(payload, arrays=self.top_k.select(key, gradient))
        if method == "powersgd" and worth_compressing(gradient.shape, self.spec.rank):
            return replace(payload, arrays=self.power_sgd.local_approximation(key, gradient))
        return replace(payload, method="none", arrays=(gradient,))


def decode(payload: Payload) -> Any:
    """The dense gradient a payload stands for (``shape``, ``dtype``; loss scale removed)."""
    method, dtype, arrays = payload.method, np.dtype(payload.dtype), payload.arrays
    if method in ("fp16", "bf16"):
        dense = decode_half(arrays[0], method, dtype)
        if payload.scale != 1.0:
            dense *= 1.0 / payload.scale
    elif method == "topk":
        dense = scatter_dense(arrays[0], arrays[1], int(np.prod(payload.shape, dtype=np.int64)))
    elif method == "powersgd":
        dense = low_rank_product(arrays[0], arrays[1])
    else:
        dense = arrays[0]
    return dense.reshape(payload.shape)


def send_payload(transport: Transport, peer: int, key: str, payload: Payload) -> None:
    for index, array in enumerate(payload.arrays):
        transport.send(peer, f"{key}/{index}", array)


def receive_payload(transport: Transport, peer: int, key: str, like: Payload) -> Payload:
    """The payload ``peer`` sent under ``key``; ``like`` is one of the same gradient and codec
    (the receiver's own, say), which says how many arrays to expect, and with what scale."""
    arrays = tuple(transport.recv(peer, f"{key}/{index}") for index in range(len(like.arrays)))
    return replace(like, arrays=arrays)
