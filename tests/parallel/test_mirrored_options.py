"""Mirrored options: gradient buckets and float16 on the wire."""

import pytest

from workbench.config import RunConfig
from workbench.launch.runner import run_training

pytestmark = pytest.mark.integration


def test_mirrored_float16_compression_halves_the_traffic(no_leftover_processes):
    flags = {"strategy": "mirrored", "devices": 2, "steps": 20, "hidden": (32, 16)}
    plain = run_training(RunConfig(**flags), progress=lambda _: None)
    packed = run_training(
        RunConfig(compression="float16", bucket_mb=0.01, **flags), progress=lambda _: None
    )
    assert packed.summary["bytes_communicated"] * 2 == plain.summary["bytes_communicated"]
    assert packed.summary["final_loss"] == pytest.approx(plain.summary["final_loss"], rel=1e-3)
