"""The vectorised ring gives the same times as the explicit ring's events, and its cost grows
with steps x ranks array work, not with events."""

from __future__ import annotations

import pytest

from workbench.simulate import (
    Compute,
    Labels,
    Link,
    Recv,
    RingOptions,
    Send,
    Signal,
    Wait,
    parse_cluster,
    ring_allreduce_programs,
    simulate,
)

ITEMSIZE = 4


def two_per_host(source, destination):
    """Fast inside a host (two devices each), slow between hosts."""
    same = int(source[1:]) // 2 == int(destination[1:]) // 2
    return Link(2e-6, 50e9) if same else Link(9e-6, 3e9)


def every_pair_differs(source, destination):
    return Link(1e-6 * (1 + int(destination[1:])), 1e9 * (1 + int(source[1:])))


def ranks(size):
    return [f"d{rank}" for rank in range(size)]


def ring_programs(size, elements, slice_bytes, vectorised, staggered, busy_link):
    options = RingOptions(slice_bytes=slice_bytes, vectorised=vectorised)
    programs = ring_allreduce_programs(ranks(size), elements * ITEMSIZE, 1e-10, "g", options)
    if staggered:  # ranks reach the ring at different times, as backward ends unevenly
        for rank, device in enumerate(ranks(size)):
            programs[device].insert(0, Compute(1e-4 * ((rank * 7) % size), "backward"))
    if busy_link:  # another stream has just put 8 MB on the link from d0 to d1
        programs["d0"].insert(0, Send("d1", 8 << 20, "other", stream="side"))
        programs["d1"].append(Recv("d0", "other", stream="side"))
    return programs


CASES = [
    # size, elements, slice bytes, link model, staggered starts, link busy at the start
    (2, 5, 1 << 21, two_per_host, False, False),
    (3, 1000, 1 << 21, every_pair_differs, False, False),
    (4, 7, 8, two_per_host, True, False),
    (5, 23, 12, every_pair_differs, True, False),
    (6, 4000, 400, two_per_host, False, True),
    (7, 5, 1 << 21, every_pair_differs, False, True),  # fewer elements than ranks
    (16, 10**5, 1 << 16, two_per_host, True, False),
]


@pytest.mark.parametrize(
    ("size", "elements", "slice_bytes", "link", "staggered", "busy_link"), CASES
)
def test_the_vectorised_ring_times_are_the_explicit_rings(
    size, elements, slice_bytes, link, staggered, busy_link
):
    explicit, vectorised = (
        simulate(ring_programs(size, elements, slice_bytes, v, staggered, busy_link), link)
        for v in (False, True)
    )
    assert vectorised.finish == explicit.finish
    for device in ranks(size):
        assert vectorised.bytes_sent(device) == explicit.bytes_sent(device)
        assert vectorised.bytes_received(device) == explicit.bytes_received(device)
        (ring,) = vectorised.of(device, "allreduce")
        last = max(i.end for i in explicit.of(device, "allreduce"))
        assert ring.end == last
    assert vectorised.events < explicit.events


def test_thousands_of_ranks_cost_steps_not_events():
    """4096 devices, 8 per host, 100 MB: one event per rank plus one vectorised round per
    step (the explicit program would be ~100 million events). The time is the textbook
    bandwidth bound of the slowest link, 2(N-1)/N x S/B, plus latencies."""
    cluster = parse_cluster("hosts=512,gpus-per-host=8,intra=nvlink:450GB/s,inter=ib:400Gb/s")
    size, nbytes = cluster.size, 100 * 10**6
    timeline = simulate(ring_allreduce_programs(cluster.devices, nbytes, 0.0, "g"), cluster.link)
    assert timeline.events == size + 2 * (size - 1)
    bound = 2 * (size - 1) / size * nbytes / cluster.inter.bandwidth
    assert bound < timeline.makespan < 1.05 * bound + 2 * (size - 1) * cluster.inter.latency
    assert timeline.bytes_sent("host100/gpu3") == pytest.approx(2 * nbytes, rel=1e-3)


def test_bucketed_rings_on_a_communication_stream_overlap_backward():
    """DDP's shape on 64 devices: backward signals each bucket, the communication stream
    reduces the buckets in order, the update waits for the last one."""
    cluster = parse_cluster("hosts=8,gpus-per-host=8,intra=nvlink:450GB/s,inter=ib:400Gb/s")
    bucket = 25 * 2**20
    programs = {device: [] for device in cluster.devices}
    for index in range(2):
        options = RingOptions(vectorised=True, labels=Labels(stream="communication"))
        rings = ring_allreduce_programs(cluster.devices, bucket, 0.0, f"b{index}", options)
        for device in cluster.devices:
            programs[device] += [
                Compute(0.01, f"backward {index}", stream="compute"),
                Signal(f"bucket {index}", stream="compute"),
                Wait(f"bucket {index}", stream="communication"),
                *rings[device],
            ]
    for device in cluster.devices:
        programs[device] += [
            Signal("reduced", stream="communication"),
            Wait("reduced", stream="compute"),
            Compute(0.002, "update", phase="update", stream="compute"),
        ]
    timeline = simulate(programs, cluster.link)
    first, second = timeline.of("host3/gpu5", "allreduce")
    one_ring = first.end - first.start
    assert (first.start, second.start) == (0.01, max(0.02, first.end))
    assert second.end - second.start == pytest.approx(one_ring)
    (update,) = timeline.of("host3/gpu5", "update")
    assert update.start == second.end
    last_ring = max(i.end for d in cluster.devices for i in timeline.of(d, "allreduce"))
    assert timeline.makespan == last_ring + 0.002
