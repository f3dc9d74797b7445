"""Top-k sparsification with error feedback (``topk:RATIO``; Stich et al. 2018, "Sparsified
SGD with Memory"; Lin et al. 2018, "Deep Gradient Compression").

Each replica sends only the RATIO largest-magnitude entries of (its gradient + its residual) as
(index, value) pairs; the residual keeps everything that was not sent and is added to the next
step's gradient, so no part of a gradient is lost, only delayed. That is error feedback: after
any number of steps, what was sent plus the residual equals the sum of the gradients.

Sparse vectors of different supports cannot be summed on the way like a ring does, so the
replicas all-gather their pairs (each sends its own to every peer) and every replica adds them
densely, in rank order: every replica gets identical bytes.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from workbench.runtime.devices import array_namespace
from workbench.runtime.transport import Transport


def top_k_count(ratio: float, size: int) -> int:
    """How many of ``size`` entries a ratio keeps: at least one.

    Examples
    --------
    >>> top_k_count(0.01, 300), top_k_count(0.01, 10), top_k_count(1.0, 7)
    (3, 1, 7)
    """
    return max(1, min(size, math.ceil(ratio * size - 1e-9)))


def index_dtype(size: int) -> Any:
    """The narrowest index type that addresses ``size`` entries (int32 below 2**31)."""
    return np.int32 if size < 2**31 else np.int64


class TopKSelector:
    """Error-feedback top-k: one residual per ``key`` (a bucket, or a variable)."""

    def __init__(self, ratio: float) -> None:
        self.ratio = ratio
        self.residuals: dict[Any, Any] = {}

    def select(self, key: Any, gradient: Any, reuse: bool = False) -> tuple[Any, Any]:
        """The (indices, values) to send for ``gradient`` (flattened), indices ascending.
        ``reuse``: ``gradient`` is the caller's scratch buffer, which becomes the residual."""
        xp = array_namespace(gradient)
        flat = gradient.reshape(-1)
        residual = self.residuals.get(key)
        if residual is None:
            accumulated = flat if reuse else flat.copy()
        elif reuse:
            accumulated = flat
            accumulated += residual
        else:
            accumulated = flat + residual
        count = top_k_count(self.ratio, accumulated.size)
        if count == accumulated.size:
            indices = xp.arange(accumulated.size)
        else:
            indices = xp.argpartition(xp.abs(accumulated), accumulated.size - count)[-count:]
            indices.sort()  # a canonical order: the message is the same whatever partition did
        indices = indices.astype(index_dtype(accumulated.size))
        values = accumulated[indices]
        accumulated[indices] = 0  # what is sent leaves the residual
        self.residuals[key] = accumulated
        return indices, values


def scatter_dense(indices: Any, values: Any, size: int, out: Any | None = None) -> Any:
    """(indices, values) as a dense vector of ``size`` (added into ``out`` if given)."""
    if out is None:
        out = array_namespace(values).zeros(size, values.dtype)
    out[indices] += values  # indices are unique within one replica's message
    return out


def sparse_allgather_sum(
    transport: Transport, indices: Any, values: Any, size: int, key: str
) -> Any:
    """Every rank's (indices, values) summed into one dense vector of ``size``, on every
    rank; each rank sends its pair straight to every peer."""
    for peer in range(transport.size):
        if peer != transport.rank:
            transport.send(peer, f"{key}/indices", indices)
            transport.send(peer, f"{key}/values", values)
    total = array_namespace(values).zeros(size, values.dtype)
    # Rank order, on every rank: the same additions in the same order give the same bytes.
    for peer in range(transport.size):
        if peer == transport.rank:
            scatter_dense(indices, values, size, total)
        else:
            scatter_dense(
                transport.recv(peer, f"{key}/indices"),
                transport.recv(peer, f"{key}/values"),
                size,
                total,
            )
    return total
