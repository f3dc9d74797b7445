"""The collective programs send and receive exactly what our real collectives do, in the same
order on every rank: both recorded as message logs and compared."""

from __future__ import annotations

import numpy as np
import pytest

import workbench.parallel.collectives.ring as ring
from tests.simulate.recorded import described, recorded
from workbench.parallel.collectives import allreduce as real_allreduce
from workbench.parallel.collectives.hierarchical import (
    hierarchical_allreduce as real_hierarchical_allreduce,
)
from workbench.parallel.collectives.reduce_to_one import reduce_to_one as real_reduce_to_one
from workbench.simulate import (
    Compute,
    RingAllReduce,
    RingOptions,
    allreduce_programs,
    hierarchical_allreduce_programs,
    push_pull,
    ring_allreduce_programs,
)
from workbench.simulate.collectives import SLICE_BYTES, chunk_bounds

ITEMSIZE = 4  # float32


def ranks(size):
    return [f"d{rank}" for rank in range(size)]


def tensor(elements):
    return np.ones(elements, dtype=np.float32)


@pytest.mark.parametrize(
    ("size", "elements", "slice_bytes"),
    [(2, 5, SLICE_BYTES), (3, 10, SLICE_BYTES), (4, 7, 8), (5, 23, 12), (3, 2, SLICE_BYTES)],
    ids=["two-ranks", "uneven-chunks", "sliced", "slices-differ-by-one", "an-empty-chunk"],
)
def test_ring_sends_and_receives_as_the_real_ring(monkeypatch, size, elements, slice_bytes):
    monkeypatch.setattr(ring, "SLICE_BYTES", slice_bytes)
    real = recorded(size, lambda t: ring.ring_allreduce(t, tensor(elements), "g"))
    options = RingOptions(slice_bytes=slice_bytes, vectorised=False)
    programs = ring_allreduce_programs(ranks(size), elements * ITEMSIZE, 1e-9, "g", options)
    assert described(programs, ranks(size)) == real


def test_ring_adds_each_received_slice_of_the_reduce_scatter_only():
    programs = ring_allreduce_programs(
        ranks(3), 12 * ITEMSIZE, 1e-9, "g", RingOptions(vectorised=False)
    )
    adds = [a for a in programs["d0"] if isinstance(a, Compute)]
    assert [a.seconds for a in adds] == pytest.approx([16e-9, 16e-9])  # 2 steps, 4 elements
    assert {a.phase for a in programs["d0"]} == {"allreduce"}


@pytest.mark.parametrize("size", [1, 2, 4])
def test_reduce_to_one_as_the_real_one(size):
    real = recorded(size, lambda t: real_reduce_to_one(t, tensor(3), "g"))
    programs = allreduce_programs(ranks(size), 3 * ITEMSIZE, 1e-9, "g", "reduce-to-one")
    assert described(programs, ranks(size)) == real


@pytest.mark.parametrize(
    "groups",
    [[[0, 1, 2], [3, 4]], [[0], [1, 2]], [[0, 1], [2, 3], [4, 5]], [[0, 1, 2]]],
    ids=["uneven", "a-lone-leader", "three-groups", "one-group"],
)
def test_hierarchical_as_the_real_one(groups):
    size = sum(len(g) for g in groups)
    real = recorded(size, lambda t: real_hierarchical_allreduce(t, tensor(9), "g", groups))
    named = [[f"d{rank}" for rank in group] for group in groups]
    unvectorised = RingOptions(vectorised=False)
    programs = hierarchical_allreduce_programs(named, 9 * ITEMSIZE, 1e-9, "g", unvectorised)
    assert described(programs, ranks(size)) == real


@pytest.mark.parametrize("algorithm", ["ring", "hierarchical-copy", "reduce-to-one"])
@pytest.mark.parametrize("elements", [2, 11], ids=["fewer-elements-than-ranks", "enough"])
def test_allreduce_picks_the_algorithm_as_the_real_dispatch(algorithm, elements):
    groups = [[0, 1], [2, 3]]
    real = recorded(4, lambda t: real_allreduce(t, tensor(elements), "g", algorithm, groups=groups))
    named = [[f"d{rank}" for rank in group] for group in groups]
    programs = allreduce_programs(
        ranks(4), elements * ITEMSIZE, 0.0, "g", algorithm, named, vectorised=False
    )
    assert described(programs, ranks(4)) == real


def test_a_large_ring_is_one_vectorised_action_per_rank():
    programs = ring_allreduce_programs(ranks(40), 400, 0.0, "g")
    assert all(len(actions) == 1 for actions in programs.values())
    (ring_action,) = programs["d7"]
    assert isinstance(ring_action, RingAllReduce)
    assert ring_action.chunk_elements == tuple(hi - lo for lo, hi in chunk_bounds(100, 40))


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: ring_allreduce_programs(ranks(2), 10, 0.0, "g"), "not whole 4-byte elements"),
        (lambda: allreduce_programs(ranks(2), 8, 0.0, "g", "butterfly"), "unknown all-reduce"),
        (
            lambda: allreduce_programs(
                ranks(3), 12, 0.0, "g", "hierarchical-copy", [["d0"], ["d1"]]
            ),
            "partition the devices",
        ),
        (lambda: push_pull(["w"], ["s0", "s1"], [8], 0.0, "g"), "each of the 2 servers"),
    ],
)
def test_builders_refuse_what_they_cannot_build(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_central_storage_is_reduce_update_broadcast_on_rank_0():
    programs = push_pull(ranks(3), ["d0"], 8, 0.0, "g", update_seconds=2.0)
    kinds = [(type(a).__name__, a.phase) for a in programs["d0"]]
    assert kinds == [
        ("Recv", "ps-push"),
        ("Recv", "ps-push"),
        ("Compute", "update"),
        ("Send", "ps-pull"),
        ("Send", "ps-pull"),
    ]
    assert [(type(a).__name__, a.phase) for a in programs["d2"]] == [
        ("Send", "ps-push"),
        ("Recv", "ps-pull"),
    ]
