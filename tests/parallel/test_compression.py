"""Gradient compression on real local clusters: every method trains ``mirrored`` on 2 devices
and keeps its accuracy while moving the bytes it should; fp16's loss scaler skips a simulated
overflow on every replica and goes on; central storage and multi-worker mirrored compress too.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from workbench.cli.main import main
from workbench.config import RunConfig
from workbench.launch.runner import run_training

QUIET = {"progress": lambda _: None}
MIRRORED = {"strategy": "mirrored", "devices": 2, "hidden": (64,), "allreduce": "ring"}
SHORT = {"steps": 4, "hidden": (32,), "lr_decay": "none"}


def train(**flags):
    return run_training(RunConfig(**flags), **QUIET)


@pytest.fixture(scope="module")
def uncompressed():
    return train(**MIRRORED, epochs=4, compression="none")


@pytest.mark.integration
@pytest.mark.parametrize(
    ("compression", "least_ratio", "most_ratio", "accuracy_given"),
    [
        # 16 bits for 32: exactly half, in every message.
        ("fp16", 2.0, 2.0, 0.005),
        ("bf16", 2.0, 2.0, 0.01),
        # 1% of the entries as (int32, float32) pairs to the one peer, against a ring that
        # sends the whole bucket: about 50x.
        ("topk:0.01", 45.0, 51.0, 0.04),
        # Rank-2 factors of 64x64 and 64x10 kernels, the 74 biases dense: about 10x.
        ("powersgd:2", 9.0, 11.0, 0.02),
    ],
)
def test_each_method_keeps_accuracy_with_fewer_bytes(
    uncompressed, compression, least_ratio, most_ratio, accuracy_given, no_leftover_processes
):
    result = train(**MIRRORED, epochs=4, compression=compression)
    summary, plain = result.summary["compression"], uncompressed.summary["compression"]
    assert plain["method"] == "none" and plain["ratio"] == 1.0
    assert (
        plain["gradient_bytes"]
        == plain["compressed_bytes"]
        == uncompressed.summary["bytes_communicated"]
    )
    assert summary["method"] == compression and summary["skipped_steps"] == 0
    # The uncompressed figure is counted, not measured: it must be what the dense run sent.
    assert summary["gradient_bytes"] == plain["gradient_bytes"]
    assert summary["compressed_bytes"] == result.summary["bytes_communicated"]
    assert least_ratio <= summary["ratio"] <= most_ratio
    assert summary["ratio"] == summary["gradient_bytes"] / summary["compressed_bytes"]
    accuracy = result.summary["test_accuracy"]
    assert accuracy >= uncompressed.summary["test_accuracy"] - accuracy_given
    assert accuracy > 0.9
    if compression in ("fp16", "bf16"):
        assert summary["loss_scale"] == 2.0**16  # no overflow, fewer than 2000 steps
    else:
        assert "loss_scale" not in summary


@pytest.mark.integration
def test_a_simulated_overflow_is_skipped_by_every_replica_then_training_goes_on(
    capsys, no_leftover_processes
):
    flags = {**MIRRORED, **SHORT, "compression": "fp16"}
    before = train(**{**flags, "steps": 3})
    skipped = train(**flags, simulate_overflow=(3,))
    # Step 3's update was skipped: the variables (and optimizer slots) are step 2's, exactly.
    for name, expected in before.parameters.items():
        np.testing.assert_array_equal(skipped.parameters[name], expected)
    assert skipped.summary["compression"]["skipped_steps"] == 1
    assert [e.step for e in skipped.log.scalars("skipped_steps")] == [3]

    code = main(
        [
            "run",
            "--strategy=mirrored",
            "--devices=2",
            "--hidden=32",
            "--allreduce=ring",
            "--lr-decay=none",
            "--steps=8",
            "--compression=fp16",
            "--simulate-overflow=3",
            "--json",
        ]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    summary = json.loads(captured.out)
    compression = summary["compression"]
    assert compression["skipped_steps"] == 1
    assert compression["loss_scale"] == 2.0**15  # halved once, not grown back yet
    assert compression["method"] == "fp16"
    assert np.isfinite(summary["final_loss"])
    # And it went on: the steps after the skip moved the variables on.
    longer = train(**{**flags, "steps": 8}, simulate_overflow=(3,))
    assert any(
        not np.array_equal(longer.parameters[name], skipped.parameters[name])
        for name in skipped.parameters
    )
    scales = {e.step: e.value for e in longer.log.scalars("loss_scale")}
    assert scales[2] == 2.0**16 and scales[3] == 2.0**15 and scales[7] == 2.0**15


@pytest.mark.integration
@pytest.mark.parametrize("compression", ["bf16", "topk:0.05", "powersgd:1"])
def test_central_storage_compresses_the_push_to_the_storage_device(
    compression, no_leftover_processes
):
    flags = {"strategy": "central-storage", "devices": 2, "hidden": (64,), "epochs": 2}
    plain = train(**flags)
    result = train(**flags, compression=compression)
    summary = result.summary["compression"]
    # Only replica 1 pushes over the wire; its dense push is every gradient, once.
    push = sum(e.bytes for e in plain.log.phases() if e.phase == "ps-push")
    assert summary["gradient_bytes"] == push
    assert summary["compressed_bytes"] < push / 1.9
    assert result.summary["test_accuracy"] > 0.85
    assert result.summary["test_accuracy"] >= plain.summary["test_accuracy"] - 0.05


@pytest.mark.integration
def test_central_storage_skips_a_simulated_overflow_on_every_replica(no_leftover_processes):
    flags = {"strategy": "central-storage", "devices": 2, **SHORT, "compression": "fp16"}
    before = train(**{**flags, "steps": 3})
    skipped = train(**flags, simulate_overflow=(3,))
    for name, expected in before.parameters.items():
        np.testing.assert_array_equal(skipped.parameters[name], expected)
    assert skipped.summary["compression"]["skipped_steps"] == 1
    assert skipped.summary["compression"]["loss_scale"] == 2.0**15


@pytest.mark.integration
@pytest.mark.parametrize("compression", ["fp16", "topk:0.05", "powersgd:2"])
def test_multi_worker_mirrored_compresses_its_hierarchical_all_reduce(
    compression, no_leftover_processes
):
    flags = {"strategy": "multi-worker-mirrored", "devices": 4, "hosts": 2, "hidden": (64,)}
    result = train(**flags, steps=40, compression=compression)
    summary = result.summary["compression"]
    assert summary["compressed_bytes"] < summary["gradient_bytes"]
    losses = [e.value for e in result.log.scalars("loss")]
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5])


@pytest.mark.integration
@pytest.mark.parametrize(("compression", "ratio"), [("topk:0.05", 9.0), ("powersgd:2", 2.0)])
def test_hybrid_compresses_each_stages_all_reduce(compression, ratio, no_leftover_processes):
    flags = {"strategy": "hybrid", "devices": 4, "stages": 2, "microbatches": 2, "hidden": (64,)}
    result = train(**flags, steps=40, compression=compression)
    summary = result.summary["compression"]
    assert summary["compressed_bytes"] * ratio < summary["gradient_bytes"]
    losses = [e.value for e in result.log.scalars("loss")]
    assert np.mean(losses[-5:]) < 0.5 * np.mean(losses[:5])


def test_hybrid_refuses_a_loss_scaled_codec():
    code = main(["run", "--strategy", "hybrid", "--devices", "4", "--compression", "fp16"])
    assert code == 2
