"""Every all-reduce algorithm, 1..8 ranks, awkward sizes: exact sums, identical bytes on every
rank, and the ring's traffic equal to 2(N-1)/N x S."""

import numpy as np
import pytest

from tests.parallel.ranks import on_ranks
from workbench.parallel.collectives import (
    SubgroupTransport,
    allreduce,
    chunk_bounds,
    plan_buckets,
    ring_allreduce,
    ring_bytes_per_rank,
)
from workbench.parallel.collectives import ring as ring
from workbench.runtime.transport import ThreadTransport

ALGORITHMS = ["ring", "hierarchical-copy", "reduce-to-one"]


def run_ranks(size, make_input, algorithm):
    return on_ranks(
        size, lambda rank, transport: allreduce(transport, make_input(rank), "t", algorithm)
    )


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("size", range(1, 9))
@pytest.mark.parametrize("length", [1, 7, 64, 1001])
def test_exact_sum_and_identical_bytes(algorithm, size, length):
    # Integer-valued floats: every summation order gives the exact answer.
    inputs = [np.arange(length, dtype=np.float64) * (rank + 1) for rank in range(size)]
    results, _ = run_ranks(size, lambda r: inputs[r], algorithm)
    expected = sum(inputs)
    for result in results:
        np.testing.assert_array_equal(result, expected)


@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("size", [2, 3, 5, 8])
def test_random_floats_give_the_same_bytes_on_every_rank(algorithm, size):
    rng = np.random.default_rng(size)
    inputs = [rng.normal(size=(13, 5)).astype(np.float32) for _ in range(size)]
    results, _ = run_ranks(size, lambda r: inputs[r], algorithm)
    assert all(r.tobytes() == results[0].tobytes() for r in results)
    np.testing.assert_allclose(results[0], np.sum(inputs, axis=0), rtol=1e-5, atol=1e-5)
    assert results[0].shape == (13, 5) and results[0].dtype == np.float32


@pytest.mark.parametrize("size", range(2, 9))
@pytest.mark.parametrize("length", [8 * 9 * 5 * 7, 1000, 999])
def test_ring_traffic_is_two_n_minus_one_over_n(size, length):
    _, transports = run_ranks(size, lambda r: np.ones(length, dtype=np.float32), "ring")
    itemsize = 4
    # The ring cuts the tensor into N contiguous chunks whose lengths differ by at most one.
    chunks = [hi - lo for lo, hi in chunk_bounds(length, size)]
    assert sum(chunks) == length and max(chunks) - min(chunks) <= (length % size != 0)
    for rank, transport in enumerate(transports):
        # Reduce-scatter: rank r sends every chunk but (r+1), the one it ends up owning, and
        # receives every chunk but its own, r. All-gather: it sends every chunk but (r+2), the
        # last one it receives, and receives every chunk but the one it owns, (r+1). Exact for
        # every length, uneven chunks included.
        sent = 2 * length - chunks[(rank + 1) % size] - chunks[(rank + 2) % size]
        received = 2 * length - chunks[rank] - chunks[(rank + 1) % size]
        assert transport.bytes_sent == sent * itemsize, (rank, transport.bytes_sent)
        assert transport.bytes_received == received * itemsize, (rank, transport.bytes_received)
        # What a rank receives is exactly what its left neighbour sent it.
        assert transport.bytes_received == transports[(rank - 1) % size].bytes_sent
        if length % size == 0:
            assert transport.bytes_sent == ring_bytes_per_rank(length * itemsize, size)
        # Uneven chunks: each rank is off 2(N-1)/N x S by at most two elements' bytes.
        off = abs(transport.bytes_sent - ring_bytes_per_rank(length * itemsize, size))
        assert off <= 2 * itemsize
    # Every chunk travels N-1 hops in each of the two phases.
    total = sum(transport.bytes_sent for transport in transports)
    assert total == 2 * (size - 1) * length * itemsize


def test_inplace_ring_reduces_into_the_callers_buffer():
    buffers = [np.arange(6, dtype=np.float64), np.ones(6)]
    results, _ = on_ranks(
        2, lambda rank, transport: ring_allreduce(transport, buffers[rank], "i", inplace=True)
    )
    for rank in range(2):
        np.testing.assert_array_equal(results[rank], np.arange(6) + 1.0)
        assert np.shares_memory(results[rank], buffers[rank])


def test_buckets_pack_and_unpack_every_tensor():
    shapes = {"a": (3, 2), "b": (5,), "c": (2, 2, 2)}
    tensors = {name: np.random.default_rng(0).normal(size=s) for name, s in shapes.items()}
    buckets = plan_buckets(shapes, 8, bucket_bytes=100)
    assert [b.names for b in buckets] == [("c",), ("b", "a")]
    for bucket in buckets:
        restored = bucket.unpack(bucket.pack(tensors))
        for name, value in restored.items():
            np.testing.assert_array_equal(value, tensors[name])


@pytest.mark.parametrize("size", [2, 3, 4])
def test_float16_wire_halves_traffic_and_keeps_ranks_identical(size):
    from workbench.parallel.collectives import ring_allreduce
    from workbench.parallel.collectives.compression import compressed_allreduce

    rng = np.random.default_rng(size)
    inputs = [rng.normal(size=1000).astype(np.float32) for _ in range(size)]
    results, transports = on_ranks(
        size,
        lambda rank, transport: compressed_allreduce(ring_allreduce, transport, inputs[rank], "c"),
    )
    assert all(r.dtype == np.float32 and r.tobytes() == results[0].tobytes() for r in results)
    np.testing.assert_allclose(results[0], np.sum(inputs, axis=0), rtol=1e-2, atol=1e-2)
    full = ring_bytes_per_rank(1000 * 4, size)
    assert all(abs(t.bytes_sent - full / 2) <= 2 * 2 * size for t in transports)


@pytest.mark.parametrize("size", range(2, 9))
@pytest.mark.parametrize("length", [7, 10, 64, 1001, 3 * 8 * 9 + 1])
def test_a_ring_cut_into_slices_gives_the_bytes_of_an_uncut_one(monkeypatch, size, length):
    # Slices of 3 elements: chunks of every length around a slice boundary, on every rank.
    rng = np.random.default_rng(length + size)
    inputs = [rng.normal(size=length) for _ in range(size)]
    uncut, _ = run_ranks(size, lambda r: inputs[r], "ring")
    monkeypatch.setattr(ring, "SLICE_BYTES", 3 * 8)
    cut, transports = run_ranks(size, lambda r: inputs[r], "ring")
    assert all(result.tobytes() == uncut[0].tobytes() for result in cut + uncut)
    if length < size:
        return  # fewer elements than ranks: reduce-to-one, not a ring
    bounds = chunk_bounds(length, size)
    for rank, transport in enumerate(transports):
        sent_chunks = [(rank - s) % size for s in range(size - 1)]
        sent_chunks += [(rank + 1 - s) % size for s in range(size - 1)]
        assert transport.bytes_sent == sum((bounds[c][1] - bounds[c][0]) * 8 for c in sent_chunks)


def test_traffic_counted_past_send_and_recv_lands_on_the_whole_transport():
    """NCCL moves a group's bytes in its own kernels; over a subgroup's view they count on the
    transport the run reads its traffic from."""
    parent = ThreadTransport.group(4)[2]
    view = SubgroupTransport(parent, [0, 2])
    view.count_traffic(100, 60)
    assert (parent.bytes_sent, parent.bytes_received) == (100, 60)
    assert (view.bytes_sent, view.bytes_received) == (100, 60)
