"""Gradient compression on the wire: float16 messages, full-precision arithmetic.

Wrapping a transport halves (for float32) the bytes every collective moves. Sums still happen in
the tensor's own dtype on each rank; only what travels is rounded. Rounding the final result
once more on every rank (idempotent) keeps the bytes identical across ranks, as an all-reduce
must.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workbench.runtime.transport import Transport, recv_into

COMPRESSION_NAMES = ("none", "float16")


class Float16Wire:
    """A :class:`Transport` that sends float16 and hands back arrays of the original dtype."""

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.rank, self.size = inner.rank, inner.size

    @property
    def bytes_sent(self) -> int:
        return self.inner.bytes_sent

    @property
    def bytes_received(self) -> int:
        return self.inner.bytes_received

    def send(self, peer: int, key: str, array: Any) -> None:
        self.inner.send(peer, key, array.astype(np.float16))

    def recv(self, peer: int, key: str) -> Any:
        return self.inner.recv(peer, key)

    def recv_into(self, peer: int, key: str, out: Any, add_to: Any = None) -> None:
        # The float16 message is widened by the update itself, exactly as ``out += recv``.
        recv_into(self.inner, peer, key, out, add_to)


def compressed_allreduce(reduce, transport: Transport, array: Any, key: str) -> Any:
    """Run ``reduce(transport, array, key)`` with float16 on the wire."""
    result = reduce(Float16Wire(transport), array, key)
    return result.astype(np.float16).astype(array.dtype)
