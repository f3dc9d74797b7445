"""16-bit gradients on the wire (``fp16``, ``bf16``), full-precision arithmetic.

Wrapping a transport halves (for float32) the bytes every collective moves. Sums still happen in
the tensor's own dtype on each rank; only what travels is rounded. Rounding the final result
once more on every rank (idempotent) keeps the bytes identical across ranks, as an all-reduce
must: the rank that summed a chunk holds it unrounded, the others got it through the wire.

NumPy has no bfloat16, so bf16 travels as ``uint16`` holding the upper half of the float32
bits, rounded to nearest even (what hardware bfloat16 conversions do): bf16 keeps float32's
exponent range (no overflow where float32 has none) with 8 bits of mantissa; fp16 keeps 11 bits
of mantissa but overflows above 65504, which is what loss scaling
(:mod:`~workbench.parallel.collectives.compression.loss_scaling`) is for.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workbench.runtime.devices import array_namespace
from workbench.runtime.transport import Transport, apply_received, recv_into

_BF16_QUIET_NAN = 0x7FC0


def to_bfloat16_bits(array: Any) -> Any:
    """The bfloat16 nearest to each element (ties to even), as ``uint16`` bit patterns.

    Examples
    --------
    >>> to_bfloat16_bits(np.array([1.0, 1.00390625, 1.01171875, -2.0], np.float32))
    array([16256, 16256, 16258, 49152], dtype=uint16)
    """
    xp = array_namespace(array)
    single = xp.ascontiguousarray(array.astype(np.float32))
    bits = single.view(np.uint32)
    # Adding 0x7FFF plus the lowest kept bit, then truncating, rounds to nearest with ties to
    # even; a carry out of the mantissa correctly bumps the exponent (up to inf). NaNs are
    # pinned to a quiet NaN: the addition could carry a NaN's payload into the sign bit.
    rounded = (bits + (0x7FFF + ((bits >> 16) & 1))) >> 16
    rounded = xp.where(xp.isnan(single), _BF16_QUIET_NAN, rounded)
    return rounded.astype(np.uint16)


def from_bfloat16_bits(bits: Any, dtype: Any = np.float32) -> Any:
    """The values of bfloat16 bit patterns (``uint16``), as ``dtype`` (exact: every bfloat16
    is a float32).

    Examples
    --------
    >>> from_bfloat16_bits(np.array([16256, 49152], np.uint16))
    array([ 1., -2.], dtype=float32)
    """
    wide = bits.astype(np.uint32) << 16
    return wide.view(np.float32).astype(dtype)


def encode_half(array: Any, method: str) -> Any:
    """``array`` as it travels: float16 (``fp16``) or bfloat16 bits (``bf16``). Values beyond
    float16's range become inf (the loss scaler's signal), silently."""
    if method == "bf16":
        return to_bfloat16_bits(array)
    with np.errstate(over="ignore"):
        return array.astype(np.float16)


def decode_half(message: Any, method: str, dtype: Any) -> Any:
    """A message from :func:`encode_half` as ``dtype``."""
    if method == "bf16":
        return from_bfloat16_bits(message, dtype)
    return message.astype(dtype)


def round_half(array: Any, method: str) -> Any:
    """``array`` rounded to what the wire carries, in its own dtype (idempotent)."""
    return decode_half(encode_half(array, method), method, array.dtype)


class HalfPrecisionWire:
    """A :class:`Transport` that sends 16 bits and hands back arrays of ``dtype``."""

    def __init__(self, inner: Transport, method: str, dtype: Any) -> None:
        self.inner, self.method, self.dtype = inner, method, np.dtype(dtype)
        self.rank, self.size = inner.rank, inner.size

    @property
    def bytes_sent(self) -> int:
        return self.inner.bytes_sent

    @property
    def bytes_received(self) -> int:
        return self.inner.bytes_received

    def send(self, peer: int, key: str, array: Any) -> None:
        self.inner.send(peer, key, encode_half(array, self.method))

    def recv(self, peer: int, key: str) -> Any:
        return decode_half(self.inner.recv(peer, key), self.method, self.dtype)

    def recv_into(self, peer: int, key: str, out: Any, add_to: Any = None) -> None:
        if self.method == "fp16":
            # A float16 message is widened by the update itself, exactly as ``out += recv``
            # (and straight out of shared memory).
            recv_into(self.inner, peer, key, out, add_to)
        else:
            apply_received(out, self.recv(peer, key), add_to)


def half_precision_allreduce(
    reduce, transport: Transport, array: Any, key: str, method: str = "fp16"
) -> Any:
    """Run ``reduce(transport, array, key)`` with 16 bits on the wire; every rank gets the
    same bytes back, in ``array``'s dtype."""
    result = reduce(HalfPrecisionWire(transport, method, array.dtype), array, key)
    return round_half(result, method)


def compressed_allreduce(reduce, transport: Transport, array: Any, key: str) -> Any:
    """``half_precision_allreduce`` with float16 (the name it had when float16 was the only
    compression)."""
    return half_precision_allreduce(reduce, transport, array, key, "fp16")
