"""The simulator reproduces the textbook cost shapes of the collectives on described clusters:
the alpha-beta model's ring (flat in N for large tensors), reduce-to-one (linear in N),
hierarchical against flat ring, and parameter-server sharding."""

from __future__ import annotations

import pytest

from workbench.simulate import (
    allreduce_programs,
    hierarchical_allreduce_programs,
    parse_cluster,
    push_pull,
    ring_allreduce_programs,
    simulate,
)

MiB = 2**20


@pytest.mark.parametrize("size", [2, 4, 8, 16, 32, 64])
def test_ring_time_is_2_n_minus_1_latencies_plus_2_n_minus_1_over_n_tensors(size):
    """T = 2(N-1) alpha + 2(N-1)/N S/B: the bandwidth term tends to 2 S/B, nearly flat in N.
    (Slices pipeline perfectly: each step costs one latency and one chunk's put time.)"""
    cluster = parse_cluster(f"hosts=1,gpus-per-host={size},intra=100GB/s@1us")
    nbytes = 256 * MiB
    timeline = simulate(ring_allreduce_programs(cluster.devices, nbytes, 0.0, "g"), cluster.link)
    link = cluster.intra
    expected = 2 * (size - 1) * link.latency + 2 * (size - 1) / size * nbytes / link.bandwidth
    assert timeline.makespan == pytest.approx(expected, rel=1e-9)
    assert nbytes / link.bandwidth < timeline.makespan < 2.1 * nbytes / link.bandwidth


@pytest.mark.parametrize("size", [2, 3, 4, 8, 16])
def test_reduce_to_one_time_grows_linearly_with_the_ranks(size):
    """The peers' tensors reach the root together (one link each), then the root puts N-1
    copies one after another: T = N S/B + 2 alpha, plus N-1 adds."""
    cluster = parse_cluster(f"hosts=1,gpus-per-host={size},intra=10GB/s@5us")
    nbytes, add = 64 * MiB, 1e-11
    programs = allreduce_programs(cluster.devices, nbytes, add, "g", "reduce-to-one")
    timeline = simulate(programs, cluster.link)
    link = cluster.intra
    expected = size * nbytes / link.bandwidth + 2 * link.latency + (size - 1) * nbytes * add
    assert timeline.makespan == pytest.approx(expected, rel=1e-9)
    assert timeline.busy(cluster.devices[0], ("allreduce",)) == pytest.approx(
        (size - 1) * nbytes * add
    )


@pytest.mark.parametrize(
    ("intra", "inter", "faster"),
    [
        ("nvlink:300GB/s", "10Gb/s", "hierarchical"),
        ("nvlink:300GB/s", "ethernet:1Gb/s", "hierarchical"),
        ("100GB/s", "100GB/s", "ring"),
    ],
    ids=["inter-host-30x-slower", "inter-host-2400x-slower", "all-links-alike"],
)
def test_hierarchical_beats_the_flat_ring_only_when_hosts_are_far_apart(intra, inter, faster):
    """Flat ring: 2(N-1)/N S/B_inter, every step waits on the inter-host link. Hierarchical:
    the ring runs over 4 leaders, 2(H-1)/H S/B_inter, plus a reduce and a broadcast inside each
    host at the fast link's 8 S/B_intra: cheaper only when the inter-host link is slow."""
    cluster = parse_cluster(f"hosts=4,gpus-per-host=8,intra={intra},inter={inter}")
    nbytes = 64 * MiB
    flat = simulate(ring_allreduce_programs(cluster.devices, nbytes, 0.0, "g"), cluster.link)
    groups = cluster.hosts_of(cluster.devices)
    grouped = simulate(hierarchical_allreduce_programs(groups, nbytes, 0.0, "g"), cluster.link)
    times = {"ring": flat.makespan, "hierarchical": grouped.makespan}
    slower = "ring" if faster == "hierarchical" else "hierarchical"
    assert times[faster] < times[slower]


@pytest.mark.parametrize("shards", [1, 2, 4])
def test_sharding_the_parameter_server_divides_its_traffic(shards):
    """Each of 8 workers pushes S/K to each of K servers in turn (S/B in all, its own link to
    each), and each server answers the 8 pulls one after another (8 S/(K B)): sharding divides
    the servers' part of the step by K, not the workers' pushes."""
    cluster = parse_cluster("hosts=1,gpus-per-host=12,intra=10GB/s@5us")
    workers, servers = cluster.devices[:8], cluster.devices[8 : 8 + shards]
    nbytes = 64 * MiB
    programs = push_pull(workers, servers, nbytes // shards, 0.0, "g")
    timeline = simulate(programs, cluster.link)
    link = cluster.intra
    expected = (1 + 8 / shards) * nbytes / link.bandwidth + 2 * link.latency
    assert timeline.makespan == pytest.approx(expected, rel=1e-9)
    assert timeline.bytes_received(servers[0]) == 8 * nbytes // shards
