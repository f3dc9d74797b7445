"""Sharded data parallelism (ZeRO 1/2/3) ends where the one-device oracle ends (float64,
1e-10 relative) on 2 and 4 devices and through the GPU double, moves exactly the bytes its
ring halves move, and its checkpoints resume under mirrored and mirrored's under it.

Bytes are derived here from the model's shapes, not read from the code. The MLP (64 inputs,
hidden 32 and 16, 10 classes) has 2778 float64 parameters. With the default 25 MiB bucket
they are one bucket; with ``--bucket-mb 0.01`` (10485 bytes, filled in reverse parameter
order) they are two: dense_2, dense_1 and dense_0/bias (10+160+16+512+32 = 730 elements,
5840 bytes; dense_0/kernel's 16384 bytes do not fit beside them) and dense_0/kernel alone
(2048 elements).
"""

from itertools import pairwise

import pytest

from tests.parallel.test_equivalence import BASE, assert_same_parameters, oracle
from workbench.config import RunConfig
from workbench.launch.runner import run_training

pytestmark = pytest.mark.integration

QUIET = {"progress": lambda _: None}
ONE_BUCKET = (2778,)
TWO_BUCKETS = (730, 2048)  # --bucket-mb 0.01
# Which buckets backward reads again at stage 3: dense_0/kernel's gradient needs no input
# gradient of the first layer, so its bucket is gathered for forward only.
READ_IN_BACKWARD = {ONE_BUCKET: (True,), TWO_BUCKETS: (True, False)}


def chunks(elements: int, ranks: int) -> list[int]:
    """The ring's chunks of a bucket: as even as whole elements allow, their edges at
    elements * k / ranks rounded to the nearest (ties to even)."""
    edges = [round(elements * k / ranks) for k in range(ranks + 1)]
    return [b - a for a, b in pairwise(edges)]


def sent_per_step(buckets: tuple[int, ...], ranks: int, rank: int, stage: int) -> int:
    """Bytes rank ``rank`` sends in one step. In the reduce-scatter's N-1 steps a rank sends
    every chunk but the one it ends up owning, chunk (rank + 1); in an all-gather's N-1 steps
    every chunk but the one it hears of last, chunk (rank + 2). Stages 1 and 2: one
    reduce-scatter and one all-gather (the updated parameters) per bucket. Stage 3: one
    reduce-scatter and an all-gather before forward, and another before backward for the
    buckets backward reads."""
    total = 0
    for elements, backward in zip(buckets, READ_IN_BACKWARD[buckets]):
        sizes = chunks(elements, ranks)
        scatter = elements - sizes[(rank + 1) % ranks]
        gather = elements - sizes[(rank + 2) % ranks]
        gathers = 1 if stage < 3 else 1 + backward
        total += scatter + gathers * gather
    return total * 8  # float64


@pytest.mark.parametrize(
    ("stage", "devices"), [(1, 2), (2, 2), (3, 2), (1, 4), (2, 4), (3, 4)], ids=str
)
def test_every_zero_stage_matches_one_device_and_moves_its_formula_bytes(
    stage, devices, no_leftover_processes
):
    buckets = TWO_BUCKETS if devices == 4 else ONE_BUCKET
    flags = {"bucket_mb": 0.01} if buckets == TWO_BUCKETS else {}
    result = run_training(
        RunConfig(
            strategy="sharded", devices=devices, zero_stage=stage, dtype="float64", **flags, **BASE
        ),
        **QUIET,
    )
    assert_same_parameters(result, oracle("float64"), 1e-10)
    assert result.summary["zero_stage"] == stage
    steps = result.summary["steps"]
    per_device = result.summary["per_device"]
    expected = [steps * sent_per_step(buckets, devices, rank, stage) for rank in range(devices)]
    assert [device["bytes_sent"] for device in per_device] == expected
    assert sum(d["bytes_received"] for d in per_device) == sum(expected)
    # Each replica keeps only its shard of the momentum slots: its chunk of every bucket.
    memory = result.summary["memory"]
    for rank, device in enumerate(d["device"] for d in per_device):
        shard = sum(chunks(elements, devices)[(rank + 1) % devices] for elements in buckets)
        assert memory[device]["by_category"]["optimizer"] == 8 * shard, device


def test_stage_3_on_the_double_gpus_matches_one_device(cpu_double_gpus, no_leftover_processes):
    result = run_training(
        RunConfig(
            strategy="sharded",
            devices=2,
            zero_stage=3,
            device_type="gpu",
            dtype="float64",
            **BASE,
        ),
        **QUIET,
    )
    assert result.summary["device_type"] == "gpu"
    assert_same_parameters(result, oracle("float64"), 1e-10)


RESUMED = {"dtype": "float64", "hidden": (32, 16), "lr_decay": "none", "optimizer": "adam"}


@pytest.mark.parametrize(
    ("first", "then"),
    [
        # Two buckets: a checkpoint joins every bucket's shards from every rank.
        ({"strategy": "sharded", "zero_stage": 3, "bucket_mb": 0.01}, {"strategy": "mirrored"}),
        ({"strategy": "mirrored"}, {"strategy": "sharded", "zero_stage": 2}),
    ],
    ids=["sharded-then-mirrored", "mirrored-then-sharded"],
)
def test_a_checkpoint_resumes_across_sharded_and_mirrored(
    first, then, tmp_path, no_leftover_processes
):
    # Adam: its moments are sharded and its step count must come back per parameter.
    straight = run_training(RunConfig(steps=8, **RESUMED), **QUIET)
    saved = str(tmp_path / "ckpt")
    run_training(RunConfig(devices=2, steps=4, save=saved, **first, **RESUMED), **QUIET)
    resumed = run_training(RunConfig(devices=2, steps=8, resume=saved, **then, **RESUMED), **QUIET)
    assert resumed.summary["first_step"] == 4
    assert_same_parameters(resumed, straight, 1e-10)
