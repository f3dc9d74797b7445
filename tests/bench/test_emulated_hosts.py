"""Two emulated hosts (network namespaces, a rate-limited link each): multi-worker-mirrored
across them reaches the one-device result in float64, its hierarchical all-reduce sends what
crosses the link from the hosts' leaders only, the planner predicts it from links measured
across the namespaces, and nothing of the hosts is left afterwards. Needs root and iproute2
(CI installs it); skipped, with the reason, elsewhere."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from workbench.bench.emulated_hosts import emulated_hosts, why_hosts_cannot_be_emulated
from workbench.config import RunConfig
from workbench.launch.runner import run_training

REASON = why_hosts_cannot_be_emulated()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")
BASE = {"steps": 12, "hidden": (32, 16), "lr_decay": "none", "dtype": "float64"}


def namespaces() -> set[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in listed.splitlines() if line.strip()}


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
        result = run_training(
            RunConfig(
                strategy="multi-worker-mirrored",
                devices=4,
                cluster=hosts.scheduler_address,
                **BASE,
            ),
            progress=lambda _: None,
        )
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
    paths = {event.path for event in result.log.phases() if event.phase == "allreduce"}
    assert any("tcp" in path for path in paths), paths
    assert result.summary["predicted_step_ms"] > 0  # calibrated across the namespaces

    assert namespaces() == before
    assert emulated_host_processes() == []
