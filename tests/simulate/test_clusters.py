"""Described clusters: names, link choice, host groups, presets and ``--what-if-cluster``."""

from __future__ import annotations

import re

import pytest

from workbench.simulate import DEVICES, PRESETS, ClusterDescription, Link, hosts_of, parse_cluster


def test_devices_are_named_host_by_host_and_links_chosen_by_host():
    cluster = ClusterDescription(2, 2, DEVICES["a100"], Link(1e-6, 1e11), Link(1e-5, 1e9))
    assert cluster.devices == ["host0/gpu0", "host0/gpu1", "host1/gpu0", "host1/gpu1"]
    assert cluster.link("host1/gpu0", "host1/gpu1") is cluster.intra
    assert cluster.link("host0/gpu1", "host1/gpu1") is cluster.inter
    assert cluster.hosts_of(cluster.devices[::-1]) == [
        ["host1/gpu1", "host1/gpu0"],
        ["host0/gpu1", "host0/gpu0"],
    ]


def test_cpu_devices_say_so():
    assert PRESETS["laptop"].devices == ["host0/cpu0", "host0/cpu1"]
    assert hosts_of(["x", "y", "x"]) == [["x", "x"], ["y"]]


def test_presets_use_published_peaks():
    h100 = PRESETS["dgx-h100"]
    assert (h100.hosts, h100.devices_per_host, h100.device) == (1, 8, DEVICES["h100"])
    assert h100.intra.bandwidth == 450e9  # NVLink 4: 900 GB/s both ways
    assert h100.inter.bandwidth == 400e9 / 8  # one 400 Gb/s NIC per GPU
    assert PRESETS["dgx-a100"].intra.bandwidth == 300e9
    assert PRESETS["cloud-8xv100-25g"].inter.bandwidth == 25e9 / 8


@pytest.mark.parametrize(
    ("text", "hosts", "per_host", "device", "intra", "inter"),
    [
        (
            "hosts=16,gpus-per-host=8,intra=nvlink:300GB/s,inter=200Gb/s",
            16,
            8,
            "h100",
            Link(3e-6, 300e9, "nvlink"),
            Link(10e-6, 25e9),
        ),
        (
            "hosts=2, gpus-per-host=4, gpu=v100, intra=pcie:16GB/s@8us, inter=ethernet:10Gb/s",
            2,
            4,
            "v100",
            Link(8e-6, 16e9, "pcie"),
            Link(30e-6, 1.25e9, "ethernet"),
        ),
        ("dgx-h100,hosts=32", 32, 8, "h100", PRESETS["dgx-h100"].intra, PRESETS["dgx-h100"].inter),
        (
            "dgx-a100,gpu=h200,inter=ib:100Gb/s@1.5us",
            1,
            8,
            "h200",
            PRESETS["dgx-a100"].intra,
            Link(1.5e-6, 12.5e9, "ib"),
        ),
        (
            "hosts=1,cpus-per-host=4,intra=shm:5GB/s@0.02ms",
            1,
            4,
            "cpu",
            Link(2e-5, 5e9, "shm"),
            Link(0.0, float("inf"), "unused"),
        ),
        (
            "hosts=3,gpus-per-host=1,inter=800MB/s@2e-4s",
            3,
            1,
            "h100",
            Link(0.0, float("inf"), "unused"),
            Link(2e-4, 8e8),
        ),
    ],
)
def test_what_if_cluster_text(text, hosts, per_host, device, intra, inter):
    cluster = parse_cluster(text)
    assert (cluster.hosts, cluster.devices_per_host) == (hosts, per_host)
    assert cluster.device == DEVICES[device]
    for parsed, expected in ((cluster.intra, intra), (cluster.inter, inter)):
        assert parsed.name == expected.name
        assert (parsed.latency, parsed.bandwidth) == pytest.approx(
            (expected.latency, expected.bandwidth)
        )
    assert cluster.name == text


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty; give a preset"),
        ("dgx-h900", "unknown preset 'dgx-h900'; presets: dgx-h100, dgx-h200"),
        ("hosts=2,gpus=8", "'gpus=8' is not FIELD=VALUE with a known field; fields: hosts"),
        ("dgx-h100,hosts", "'hosts' is not FIELD=VALUE"),
        ("hosts=2,hosts=3", "hosts: given twice"),
        ("hosts=two,gpus-per-host=8,intra=1GB/s,inter=1GB/s", "hosts: 'two' is not a whole"),
        ("hosts=0,gpus-per-host=8", "hosts: '0' is not a whole number >= 1"),
        ("gpus-per-host=8,intra=1GB/s", "hosts: missing"),
        ("hosts=2,intra=1GB/s,inter=1GB/s", "gpus-per-host: missing"),
        ("hosts=2,gpus-per-host=8,intra=1GB/s", "inter: missing; a link like"),
        ("hosts=1,gpus-per-host=2", "intra: missing"),
        ("hosts=2,gpus-per-host=1,inter=200Gbps", "inter: '200Gbps' is not a link like"),
        ("hosts=2,gpus-per-host=1,inter=200GiB/s", "inter: unknown unit 'GiB/s'; one of TB/s"),
        ("hosts=2,gpus-per-host=1,inter=wifi:1Gb/s", "unknown medium 'wifi'; one of nvlink"),
        ("hosts=2,gpus-per-host=1,inter=1Gb/s@5min", "unknown time unit 'min'; one of s, ms"),
        ("hosts=2,gpus-per-host=1,inter=0Gb/s", "inter: the bandwidth must be > 0"),
        ("dgx-h100,gpu=b200", "gpu: unknown 'b200'; one of h100, h200, a100, v100"),
        ("dgx-h100,gpu=cpu", "gpu: unknown 'cpu'"),
        ("laptop,cpus-per-host=2,gpus-per-host=2", "give one of them"),
        ("laptop,cpus-per-host=2,gpu=h100", "gpu: not with cpus-per-host"),
    ],
)
def test_bad_text_names_the_field_and_what_it_allows(text, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_cluster(text)
