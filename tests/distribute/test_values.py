"""PerReplica values, reduce and distributed data sets, on the client alone (no cluster)."""

from __future__ import annotations

import numpy as np
import pytest

import workbench
from workbench import ConfigError, GlobalBatchSampler, PerReplica, ReduceOp, load_dataset
from workbench.data import shard_rows


@pytest.fixture
def mirrored():
    return workbench.MirroredStrategy(devices=2)


def test_reduce_sums_and_averages_across_replicas(mirrored):
    losses = PerReplica((1.0, 3.0))
    assert float(mirrored.reduce("SUM", losses, axis=None)) == 4.0
    assert float(mirrored.reduce(ReduceOp.MEAN, losses, axis=None)) == 2.0
    assert float(mirrored.reduce("mean", 5.0)) == 5.0  # a plain value is every replica's
    assert float(mirrored.reduce("SUM", 5.0)) == 10.0
    parts = PerReplica((np.array([1.0, 2.0, 3.0]), np.array([5.0])))
    assert float(mirrored.reduce("MEAN", parts, axis=0)) == pytest.approx(11.0 / 4)
    assert mirrored.experimental_local_results(losses) == (1.0, 3.0)
    assert mirrored.experimental_local_results(7) == (7,)


@pytest.mark.parametrize("op", ["MAX", "avg", 3, None])
def test_an_unknown_reduce_op_names_the_field_and_the_choices(mirrored, op):
    with pytest.raises(ConfigError) as raised:
        mirrored.reduce(op, PerReplica((1.0, 2.0)))
    assert raised.value.field == "reduce_op"
    assert "choose one of: SUM, MEAN" in str(raised.value)


def test_the_distributed_dataset_splits_fits_global_batches(mirrored):
    dataset = mirrored.experimental_distribute_dataset("digits", global_batch_size=64, seed=3)
    digits = load_dataset("digits", seed=3)
    sampler = GlobalBatchSampler(len(digits.y_train), 64, seed=3)
    # Step 25 is in the second epoch: the epochs follow one another as fit's do.
    for step, batch in zip(range(26), dataset):
        if step not in (0, 25):
            continue
        indices = sampler.batch_indices(step)
        assert len(batch.values) == 2
        for replica, (x, y) in enumerate(batch.values):
            rows = indices[shard_rows(64, replica, 2)]
            # The inputs as the model reads them: pixel counts / 16, as float64.
            assert x.dtype == np.float64
            assert np.array_equal(x, digits.x_train[rows] / 16.0)
            assert np.array_equal(y, digits.y_train[rows])
    one_epoch = mirrored.experimental_distribute_dataset("digits", 64, seed=3, epochs=1)
    assert len(list(one_epoch)) == len(one_epoch) == sampler.steps_per_epoch


def test_arrays_distribute_too_and_bad_batches_are_refused():
    x, y = np.arange(24.0).reshape(12, 2), np.arange(12) % 3
    strategy = workbench.MirroredStrategy(devices=3)
    first = next(iter(strategy.experimental_distribute_dataset((x, y), 6, seed=0)))
    assert [part[0].shape for part in first.values] == [(2, 2)] * 3
    with pytest.raises(ConfigError) as raised:
        strategy.experimental_distribute_dataset((x, y), global_batch_size=4)
    assert raised.value.field == "global_batch_size" and "replicas=3" in str(raised.value)
    with pytest.raises(ConfigError) as raised:
        strategy.experimental_distribute_dataset((x, y[:5]), global_batch_size=6)
    assert raised.value.field == "dataset"
    with pytest.raises(ConfigError) as raised:
        strategy.experimental_distribute_dataset("nonesuch", global_batch_size=6)
    assert raised.value.field == "dataset"


@pytest.mark.parametrize(
    ("name", "options", "replicas"),
    [
        ("OneDeviceStrategy", {}, 1),
        ("MirroredStrategy", {"devices": 4}, 4),
        ("CentralStorageStrategy", {"devices": 2}, 2),
        ("MultiWorkerMirroredStrategy", {"devices": 4, "hosts": 2}, 4),
        ("ParameterServerStrategy", {"devices": 3, "ps": 2}, 3),
        ("PipelineStrategy", {"devices": 2, "stages": 2}, 1),
        ("ModelParallelStrategy", {"devices": 2}, 1),
        ("HybridStrategy", {"devices": 4, "stages": 2}, 2),
    ],
)
def test_replicas_in_sync(name, options, replicas):
    assert getattr(workbench, name)(**options).num_replicas_in_sync == replicas


def test_the_batch_order_follows_the_compiled_seed():
    strategy = workbench.MirroredStrategy(devices=2)
    assert strategy.experimental_distribute_dataset("digits", 64).sampler.seed == 0
    with strategy.scope():
        model = workbench.Sequential(
            [workbench.Flatten(), workbench.Dense(10)], input_shape=(1, 8, 8)
        )
    model.compile(seed=7, batch_size=64, steps=3)
    assert strategy.experimental_distribute_dataset("digits", 64).sampler.seed == 7
    assert strategy.experimental_distribute_dataset("digits", 64, seed=1).sampler.seed == 1
