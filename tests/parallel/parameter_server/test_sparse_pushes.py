"""A partitioned embedding on parameter servers: each push carries only the rows the worker's
slice of the batch looked up, so the bytes pushed per step follow the rows touched (checked
exactly, step by step, at two batch sizes), and training still equals one device."""

import numpy as np
import pytest

from workbench.config import RunConfig
from workbench.data import GlobalBatchSampler, load_dataset, shard_rows
from workbench.launch.runner import run_training
from workbench.models import Dense, Sequential
from workbench.models.layers import Embedding
from workbench.models.transformer import TokenMean

pytestmark = pytest.mark.integration

DATASET = "tokens:20000:8:4:3000"
WIDTH, WORKERS, STEPS = 16, 2, 6


def bag_model():
    return Sequential(
        [Embedding(20000, WIDTH), TokenMean(), Dense(4)], input_shape=(8,), name="bag"
    )


def expected_push_bytes(batch_size: int) -> int:
    """Every worker's pushes over the run: per step, (index, row) for each distinct id in its
    slice, plus the dense classifier's gradients (float64 everywhere, int64 indices)."""
    dataset = load_dataset(DATASET)
    sampler = GlobalBatchSampler(len(dataset.y_train), batch_size, 0)
    dense = (WIDTH * 4 + 4) * 8
    total = 0
    for step in range(STEPS):
        batch = sampler.batch_indices(step)
        for worker in range(WORKERS):
            ids = dataset.x_train[batch[shard_rows(batch_size, worker, WORKERS)]].astype(int)
            total += len(np.unique(ids)) * (WIDTH * 8 + 8) + dense
    return total


@pytest.mark.parametrize("batch_size", [16, 64])
def test_bytes_pushed_follow_the_rows_touched(batch_size, no_leftover_processes):
    config = RunConfig(
        strategy="parameter-server",
        devices=WORKERS,
        ps=2,
        ps_partition_min_bytes=100_000,  # the 2.5 MB table in 2 parts
        dataset=DATASET,
        dtype="float64",
        batch_size=batch_size,
        steps=STEPS,
        lr_decay="none",
    )
    result = run_training(config, model=bag_model(), progress=lambda _: None)
    pushed = sum(device["bytes_sent"] for device in result.summary["per_device"][:WORKERS])
    assert pushed == expected_push_bytes(batch_size)
    table = 20000 * WIDTH * 8
    assert pushed < 0.05 * STEPS * WORKERS * table  # a dense push would move the whole table

    oracle = run_training(
        RunConfig(
            dataset=DATASET, dtype="float64", batch_size=batch_size, steps=STEPS, lr_decay="none"
        ),
        model=bag_model(),
        progress=lambda _: None,
    )
    for name, expected in oracle.parameters.items():
        got = result.parameters[name]
        assert np.max(np.abs(got - expected)) <= 1e-10 * np.max(np.abs(expected)), name
