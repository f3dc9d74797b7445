"""The ring all-reduce's two halves on their own: the reduce-scatter leaves each rank the
exact sum of the chunk it owns, the all-gather hands every owned chunk to every rank, each
sends N-1 chunks, and the two composed are the all-reduce, bit for bit."""

from itertools import pairwise

import numpy as np
import pytest

from tests.parallel.ranks import on_ranks
from workbench.parallel.collectives.ring import (
    owned_chunk,
    ring_all_gather,
    ring_allreduce,
    ring_reduce_scatter,
)


def edges(length: int, ranks: int) -> list[tuple[int, int]]:
    """The ring's chunks, derived here: edges at length * k / ranks, rounded (ties to even)."""
    points = [round(length * k / ranks) for k in range(ranks + 1)]
    return list(pairwise(points))


@pytest.mark.parametrize("size", [1, 2, 3, 5])
@pytest.mark.parametrize("length", [7, 64, 1001])
def test_reduce_scatter_leaves_each_rank_the_sum_of_the_chunk_it_owns(size, length):
    inputs = [np.arange(length, dtype=np.float64) * (rank + 1) for rank in range(size)]
    results, transports = on_ranks(
        size, lambda rank, transport: ring_reduce_scatter(transport, inputs[rank], "rs")
    )
    total = sum(inputs)
    chunks = edges(length, size)
    for rank, (result, transport) in enumerate(zip(results, transports)):
        owned = (rank + 1) % size
        assert owned_chunk(rank, size) == owned
        lo, hi = chunks[owned]
        np.testing.assert_array_equal(result[lo:hi], total[lo:hi])
        # Every chunk but the owned one went to the right neighbour, 8 bytes an element.
        assert transport.bytes_sent == 8 * (length - (hi - lo)) * (size > 1)
        np.testing.assert_array_equal(inputs[rank], np.arange(length) * (rank + 1))


@pytest.mark.parametrize("size", [2, 3, 5])
def test_all_gather_hands_every_owned_chunk_to_every_rank(size):
    length = 1001
    whole = np.random.default_rng(size).normal(size=length)
    chunks = edges(length, size)

    def gather(rank, transport):
        buffer = np.full(length, np.nan)
        lo, hi = chunks[(rank + 1) % size]
        buffer[lo:hi] = whole[lo:hi]
        returned = ring_all_gather(transport, buffer, "ag")
        assert returned is buffer  # in place
        return buffer

    results, transports = on_ranks(size, gather)
    for rank, (result, transport) in enumerate(zip(results, transports)):
        assert result.tobytes() == whole.tobytes()
        # Every chunk but (rank + 2), the one it hears of last.
        lo, hi = chunks[(rank + 2) % size]
        assert transport.bytes_sent == 8 * (length - (hi - lo))


@pytest.mark.parametrize("size", [2, 4, 7])
def test_the_halves_composed_are_the_all_reduce_bit_for_bit(size):
    rng = np.random.default_rng(size)
    inputs = [rng.normal(size=(37, 3)).astype(np.float32) for _ in range(size)]
    whole, _ = on_ranks(size, lambda rank, transport: ring_allreduce(transport, inputs[rank], "x"))

    def halves(rank, transport):
        flat = ring_reduce_scatter(transport, inputs[rank], "y")
        return ring_all_gather(transport, flat, "y").reshape(37, 3)

    composed, _ = on_ranks(size, halves)
    for a, b in zip(whole, composed):
        assert a.tobytes() == b.tobytes()
