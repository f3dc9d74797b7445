"""Every synchronous strategy ends where the one-device oracle ends
(docs/architecture/determinism.md, "Same data, same result"): 20 steps of the MLP on digits,
float64 within 1e-10 relative, float32 within 1e-5. The mirrored
all-reduce algorithms are told apart by how their traffic falls on the devices."""

from itertools import pairwise

import numpy as np
import pytest

from workbench.config import RunConfig
from workbench.launch.runner import run_training

pytestmark = pytest.mark.integration

BASE = {"steps": 20, "hidden": (32, 16), "lr_decay": "none"}
ORACLES: dict = {}


def oracle(dtype):
    if dtype not in ORACLES:
        ORACLES[dtype] = run_training(RunConfig(dtype=dtype, **BASE), progress=lambda _: None)
    return ORACLES[dtype]


def assert_same_parameters(result, reference, tolerance):
    assert result.parameters.keys() == reference.parameters.keys()
    for name, expected in reference.parameters.items():
        got = result.parameters[name]
        scale = np.max(np.abs(expected))
        assert np.max(np.abs(got - expected)) <= tolerance * scale, name


def assert_backwards_send_before_weight_gradients(result) -> None:
    """On every stage but the first, each backward hands its input gradient back as soon as
    it is computed: its compute, the send, then the rest of its compute (the weight
    gradients). The first stage has no input gradient: one compute per backward."""
    for device in {event.device for event in result.log.phases()}:
        first_stage = "/task:0/" in device
        for step in range(result.summary["steps"]):
            events = sorted(
                (e for e in result.log.phases(device) if e.step == step), key=lambda e: e.start
            )
            kinds = [
                "send" if e.phase.value == "send" else e.action
                for e in events
                if e.phase.value == "send" or e.action.startswith("B")
            ]
            backwards = sorted({kind for kind in kinds if kind != "send"})
            for label in backwards:
                at = [i for i, kind in enumerate(kinds) if kind == label]
                if first_stage:
                    assert len(at) == 1, (device, step, kinds)
                else:
                    assert len(at) == 2 and at[1] == at[0] + 2, (device, step, kinds)
                    assert kinds[at[0] + 1] == "send", (device, step, kinds)


def ring_bytes(nbytes: int, ranks: int) -> float:
    """What each rank of a ring all-reduce of ``nbytes`` sends (and receives): the tensor in N
    chunks, N-1 of them passed on in the reduce-scatter and N-1 in the all-gather."""
    chunk = nbytes / ranks
    return (ranks - 1) * chunk + (ranks - 1) * chunk


def allreduce_bytes_per_rank(algorithm: str, devices: int, nbytes: int) -> list[float]:
    """What each rank sends, and receives, in one all-reduce of ``nbytes`` (derived here from
    the algorithms, not read from the code)."""
    if algorithm == "ring":
        # Spread evenly: every rank sends 2(N-1)/N x S to its neighbour.
        return [ring_bytes(nbytes, devices)] * devices
    if algorithm == "reduce-to-one":
        # Concentrated on rank 0: it receives N-1 tensors and sends the sum back N-1 times;
        # every other rank sends one tensor and receives one.
        return [(devices - 1) * nbytes] + [nbytes] * (devices - 1)
    # hierarchical-copy on one host: two groups of consecutive ranks. Members send their
    # tensor to the group's leader and get the total back; the two leaders also run a ring
    # between them (one tensor each way).
    assert algorithm == "hierarchical-copy" and devices % 2 == 0
    members = devices // 2
    leader = (members - 1) * nbytes + ring_bytes(nbytes, 2)
    group = [leader] + [nbytes] * (members - 1)
    return group + group


CONFIGURATIONS = [
    {"strategy": "mirrored", "allreduce": "ring"},
    {"strategy": "mirrored", "allreduce": "hierarchical-copy"},
    {"strategy": "mirrored", "allreduce": "reduce-to-one"},
    {"strategy": "mirrored", "replication": "in-graph"},
    {"strategy": "central-storage"},
    {"strategy": "central-storage", "replication": "in-graph"},
    {"strategy": "multi-worker-mirrored"},
    {"strategy": "parameter-server", "ps": 1},
    {"strategy": "parameter-server", "ps": 2},
    {"strategy": "parameter-server", "ps": 3},
    # dense_0/kernel (64 x 32 float64, 16 KiB) in 2 parts, one per shard
    {"strategy": "parameter-server", "ps": 2, "ps_partition_min_bytes": 4096},
    {"strategy": "parameter-server", "ps": 2, "replication": "in-graph"},
    {"strategy": "pipeline", "schedule": "gpipe"},
    {"strategy": "pipeline", "schedule": "1f1b"},
    {"strategy": "hybrid", "schedule": "1f1b"},
    {"strategy": "model-parallel", "placement": "balanced-params"},
    {"strategy": "model-parallel", "placement": "greedy"},
]


@pytest.mark.parametrize("devices", [2, 4])
@pytest.mark.parametrize("flags", CONFIGURATIONS, ids=lambda f: "-".join(map(str, f.values())))
def test_float64_matches_one_device(flags, devices, no_leftover_processes):
    if flags["strategy"] == "pipeline":
        flags = {**flags, "stages": devices}  # one stage per device
    if flags["strategy"] == "hybrid":
        flags = {**flags, "stages": devices // 2}  # a 2 x (devices/2) mesh
        if devices == 2:
            flags["stages"] = 1  # 2 replicas of a one-stage pipeline

    result = run_training(
        RunConfig(devices=devices, dtype="float64", **flags, **BASE), progress=lambda _: None
    )
    assert_same_parameters(result, oracle("float64"), 1e-10)
    assert result.summary["final_loss"] == pytest.approx(
        oracle("float64").summary["final_loss"], rel=1e-10
    )
    per_device = result.summary["per_device"]
    assert len(per_device) == devices + flags.get("ps", 0)
    if flags["strategy"] in ("pipeline", "hybrid"):
        # A stage runs on one thread: its phases follow one another, none inside another
        # (the timeline and the busy fractions add them up).
        for device in {event.device for event in result.log.phases()}:
            spans = sorted((e.start, e.end) for e in result.log.phases(device))
            assert all(end <= later for (_, end), (later, _) in pairwise(spans)), device
    if flags["strategy"] == "pipeline" and devices > 1:
        assert_backwards_send_before_weight_gradients(result)
    if flags.get("placement") == "greedy":
        # The cost model may keep this small model on fewer devices (a transfer costs more
        # than its nodes; tests/parallel/test_model_parallel_placement.py has a model it
        # splits), so which devices talk is its choice. What it moves is still accounted:
        # every byte a device sends another receives, the total is their sum, a device that
        # talks has a peer, and every step moves the same activations and gradients.
        sent = [d["bytes_sent"] for d in per_device]
        received = [d["bytes_received"] for d in per_device]
        assert sum(sent) == sum(received) == result.summary["bytes_communicated"]
        assert sum(1 for d in per_device if d["bytes_sent"] + d["bytes_received"]) != 1
        assert all(n % result.summary["steps"] == 0 for n in sent + received), per_device
    else:
        assert result.summary["bytes_communicated"] > 0
        for device in per_device:
            # Every device takes part in the traffic (a model-parallel device holding only a
            # reshape sends its activation but needs nothing back).
            assert device["bytes_sent"] + device["bytes_received"] > 0, device
    if flags["strategy"] == "mirrored" and "allreduce" in flags:
        # One all-reduce of the float64 gradients per step (one bucket). With 2 devices the
        # three algorithms move the same bytes (one tensor each way per device); with 4 the
        # pattern tells them apart: ring even, hierarchical-copy heavier on the 2 leaders,
        # reduce-to-one 3x on rank 0. Within 0.1%: the ring's chunks differ by one element.
        gradient_bytes = sum(value.nbytes for value in oracle("float64").parameters.values())
        per_step = allreduce_bytes_per_rank(flags["allreduce"], devices, gradient_bytes)
        expected = [result.summary["steps"] * nbytes for nbytes in per_step]
        assert [d["bytes_sent"] for d in per_device] == pytest.approx(expected, rel=1e-3)
        assert [d["bytes_received"] for d in per_device] == pytest.approx(expected, rel=1e-3)


def test_float32_ring_matches_one_device(no_leftover_processes):
    result = run_training(
        RunConfig(strategy="mirrored", devices=2, **BASE), progress=lambda _: None
    )
    assert_same_parameters(result, oracle("float32"), 1e-5)


@pytest.mark.parametrize(
    "flags",
    [
        {"strategy": "mirrored"},
        {"strategy": "pipeline", "microbatches": 2},
        {"strategy": "model-parallel"},
    ],
    ids=lambda f: f["strategy"],
)
def test_a_one_device_checkpoint_resumes_under_a_distributed_strategy(
    flags, tmp_path, no_leftover_processes
):
    common = {"dtype": "float64", "hidden": (32, 16), "lr_decay": "none"}
    straight = run_training(RunConfig(steps=30, **common), progress=lambda _: None)
    saved = str(tmp_path / "ckpt")
    run_training(RunConfig(steps=12, save=saved, **common), progress=lambda _: None)
    resumed = run_training(
        RunConfig(devices=2, steps=30, resume=saved, **flags, **common), progress=lambda _: None
    )
    assert resumed.summary["first_step"] == 12
    assert_same_parameters(resumed, straight, 1e-10)


@pytest.mark.parametrize("strategy", ["mirrored", "model-parallel"])
def test_the_tcp_path_without_shared_memory_matches_one_device(
    strategy, monkeypatch, no_leftover_processes
):
    # The workers inherit this environment: every Send goes over Dask's TCP comms instead.
    monkeypatch.setenv("DTRAIN_SHARED_MEMORY", "0")
    result = run_training(
        RunConfig(strategy=strategy, devices=2, dtype="float64", **BASE), progress=lambda _: None
    )
    assert_same_parameters(result, oracle("float64"), 1e-10)
