"""Two emulated hosts (network namespaces, a rate-limited link each): multi-worker-mirrored
across them reaches the one-device result in float64, its hierarchical all-reduce sends what
crosses the link from the hosts' leaders only, the planner predicts it from links measured
across the namespaces, and nothing of the hosts is left afterwards. Needs root and iproute2
(CI installs it); skipped, with the reason, elsewhere."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from benchmarks.emulated_hosts import emulated_hosts, why_hosts_cannot_be_emulated
from workbench.config import RunConfig
from workbench.launch.runner import run_training

REASON = why_hosts_cannot_be_emulated()
pytestmark = [pytest.mark.integration, pytest.mark.skipif(REASON is not None, reason=REASON or "")]
BASE = {"steps": 12, "hidden": (32, 16), "lr_decay": "none", "dtype": "float64"}


def namespaces() -> set[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in listed.splitlines() if line.strip()}


def host_file_systems() -> list[str]:
    """The hosts' /dev/shm file systems still mounted."""
    return [line for line in open("/proc/mounts") if "dtrain-hosts-" in line]


def emulated_host_processes() -> list[str]:
    """Processes started for an emulated host: they listen on its subnet."""
    found = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return [line for line in found.splitlines() if "10.213.0." in line]


def test_multi_worker_mirrored_across_two_emulated_hosts(tmp_path, monkeypatch):
    monkeypatch.setenv("DTRAIN_RUN_STORE", str(tmp_path / "runs"))
    before = namespaces()
    with emulated_hosts(hosts=2, workers_per_host=2, rate="200mbit") as hosts:
        assert len(namespaces() - before) == 3  # the two hosts and their switch
        assert hosts.host_addresses == ("10.213.0.1", "10.213.0.2")
        assert len(host_file_systems()) == 2  # a /dev/shm of its own for each host
        before_run = hosts.link_bytes()
        result = run_training(
            RunConfig(
                strategy="multi-worker-mirrored",
                devices=4,
                cluster=hosts.scheduler_address,
                no_calibrate=True,  # the links' ping-pongs would cross them too
                **BASE,
            ),
            progress=lambda _: None,
        )
        crossed = [after[0] - earlier[0] for after, earlier in zip(hosts.link_bytes(), before_run)]
    oracle = run_training(RunConfig(**BASE), progress=lambda _: None)
    for name, expected in oracle.parameters.items():
        scale = np.max(np.abs(expected))
        assert np.max(np.abs(result.parameters[name] - expected)) <= 1e-10 * scale, name

    # The hosts' leaders (ranks 0 and 2) exchange the sum over the link; their members only
    # send to their leader: the leaders send twice what the members do (two devices a host).
    sent: dict[str, int] = {}
    for event in result.log.phases():
        if event.phase == "allreduce":
            sent[event.device] = sent.get(event.device, 0) + event.bytes
    members, leaders = sorted(sent.values())[:2], sorted(sent.values())[2:]
    assert members[0] == members[1] and leaders[0] == leaders[1] == 2 * members[0]
    # Members reach their leader through their host's shared memory; only the leaders' sums
    # go over TCP, through the shaped links: each host's link carried at least its leader's
    # share (half of what it sends; the other half goes to its member).
    paths: dict[str, set[str]] = {}
    for event in result.log.phases():
        if event.phase == "allreduce" and event.bytes:
            paths.setdefault(event.device, set()).add(event.path)
    devices = sorted(paths)
    assert all("tcp" not in path for device in devices[1::2] for path in paths[device]), paths
    assert all(any("tcp" in path for path in paths[device]) for device in devices[::2]), paths
    for host, leader in enumerate(devices[::2]):
        assert crossed[host] >= sent[leader] / 2, (host, crossed, sent)

    assert namespaces() == before
    assert emulated_host_processes() == []
    assert host_file_systems() == []


def test_the_hierarchical_all_reduce_beats_a_flat_ring_on_a_slow_link(tmp_path, monkeypatch):
    """On 100 Mbit/s links a flat ring puts a gradient and a half (1.6 MB here) on each host's
    link per step, the hierarchical all-reduce one gradient (its leader's): side by side, the
    same steps."""
    monkeypatch.setenv("DTRAIN_RUN_STORE", str(tmp_path / "runs"))
    run = {"devices": 4, "dataset": "synthetic", "hidden": (512,), "steps": 10, "batch_size": 64}
    with emulated_hosts(hosts=2, workers_per_host=2, rate="100mbit") as hosts:
        seconds = {}
        for name, options in (
            ("hierarchical", {"strategy": "multi-worker-mirrored"}),
            ("ring", {"strategy": "mirrored", "allreduce": "ring"}),
        ):
            config = RunConfig(**run, **options, cluster=hosts.scheduler_address, no_calibrate=True)
            summary = run_training(config, progress=lambda _: None).summary
            seconds[name] = summary["global_batch_size"] / summary["samples_per_second"]
    assert seconds["hierarchical"] < seconds["ring"], seconds
