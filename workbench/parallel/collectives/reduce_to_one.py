"""Reduce-to-one then broadcast (TF's ``ReductionToOneDevice``; the parameter-server pattern):
every rank sends its tensor to the root, the root sums and sends the result back.

Simple and latency-light (two hops), but the root moves N-1 tensors each way, so its link is the
bottleneck as N grows; ring all-reduce spreads that load evenly.
"""

from __future__ import annotations

from typing import Any

from workbench.runtime.transport import Transport


def reduce(transport: Transport, array: Any, key: str, root: int = 0) -> Any | None:
    """Sum over all ranks at ``root`` (which gets the sum; the others get None)."""
    if transport.rank != root:
        transport.send(root, f"{key}/reduce", array)
        return None
    total = array.copy()
    # Fixed rank order, so the floating-point sum is the same on every run.
    for peer in range(transport.size):
        if peer != root:
            total += transport.recv(peer, f"{key}/reduce")
    return total


def reduce_to_one(transport: Transport, array: Any, key: str, root: int = 0) -> Any:
    """Sum over all ranks at ``root``, then broadcast; returns the sum on every rank."""
    if transport.size == 1:
        return array.copy()
    total = reduce(transport, array, key, root)
    return broadcast(transport, total if total is not None else array, key, root)


def broadcast(transport: Transport, array: Any, key: str, root: int = 0) -> Any:
    """``root``'s array on every rank."""
    if transport.size == 1:
        return array.copy()
    if transport.rank == root:
        for peer in range(transport.size):
            if peer != root:
                transport.send(peer, f"{key}/broadcast", array)
        return array.copy()
    return transport.recv(root, f"{key}/broadcast")
