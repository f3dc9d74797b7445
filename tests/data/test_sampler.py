"""Global batches identical for every strategy; replica shards and micro-batches tile them."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.data import DatasetError, GlobalBatchSampler, microbatch_rows, shard_rows


def epoch_batches(sampler: GlobalBatchSampler, epoch: int) -> list[np.ndarray]:
    first = epoch * sampler.steps_per_epoch
    return [sampler.batch_indices(step) for step in range(first, first + sampler.steps_per_epoch)]


def test_each_epoch_covers_every_index_exactly_once() -> None:
    sampler = GlobalBatchSampler(num_samples=48, batch_size=8, seed=3)
    assert sampler.steps_per_epoch == 6
    for epoch in range(3):
        seen = np.concatenate(epoch_batches(sampler, epoch))
        np.testing.assert_array_equal(np.sort(seen), np.arange(48))


def test_last_partial_batch_is_dropped() -> None:
    sampler = GlobalBatchSampler(num_samples=50, batch_size=8, seed=0)
    assert sampler.steps_per_epoch == 6
    seen = np.concatenate(epoch_batches(sampler, 0))
    assert len(seen) == 48 and len(np.unique(seen)) == 48
    assert seen.min() >= 0 and seen.max() < 50
    # Step 6 already starts epoch 1.
    assert sampler.epoch_of(5) == 0 and sampler.epoch_of(6) == 1


def test_batches_are_int64_of_the_batch_size() -> None:
    batch = GlobalBatchSampler(100, 16, seed=0).batch_indices(0)
    assert batch.dtype == np.int64
    assert batch.shape == (16,)


def test_follows_the_documented_permutation_so_every_consumer_agrees() -> None:
    sampler = GlobalBatchSampler(num_samples=30, batch_size=4, seed=9)
    step = 17  # epoch 2 (7 steps per epoch), position 3
    expected = np.random.default_rng([9, 2]).permutation(30)[12:16]
    np.testing.assert_array_equal(sampler.batch_indices(step), expected)


def test_different_epochs_and_seeds_give_different_orders() -> None:
    sampler = GlobalBatchSampler(num_samples=64, batch_size=64, seed=1)
    assert not np.array_equal(sampler.batch_indices(0), sampler.batch_indices(1))
    other_seed = GlobalBatchSampler(num_samples=64, batch_size=64, seed=2)
    assert not np.array_equal(sampler.batch_indices(0), other_seed.batch_indices(0))


def test_batch_indices_is_random_access() -> None:
    steps = list(range(25))
    in_order = GlobalBatchSampler(40, 6, seed=5)
    expected = {step: in_order.batch_indices(step) for step in steps}
    shuffled = GlobalBatchSampler(40, 6, seed=5)
    for step in np.random.default_rng(0).permutation(steps)[::-1]:
        np.testing.assert_array_equal(shuffled.batch_indices(int(step)), expected[int(step)])
    # A "resumed" sampler that starts mid-run sees exactly the same batches.
    resumed = GlobalBatchSampler(40, 6, seed=5)
    np.testing.assert_array_equal(resumed.batch_indices(20), expected[20])


def test_mutating_a_returned_batch_does_not_change_later_batches() -> None:
    sampler = GlobalBatchSampler(20, 5, seed=0)
    batch = sampler.batch_indices(0)
    expected = batch.copy()
    batch[:] = -1
    np.testing.assert_array_equal(sampler.batch_indices(0), expected)


@pytest.mark.parametrize(("num_samples", "batch_size"), [(10, 11), (10, 0), (10, -1), (0, 1)])
def test_invalid_batch_size_is_rejected(num_samples: int, batch_size: int) -> None:
    with pytest.raises(DatasetError, match="must be"):
        GlobalBatchSampler(num_samples, batch_size, seed=0)


def test_negative_step_or_seed_is_rejected() -> None:
    with pytest.raises(DatasetError, match="step"):
        GlobalBatchSampler(10, 2, seed=0).batch_indices(-1)
    with pytest.raises(DatasetError, match="seed"):
        GlobalBatchSampler(10, 2, seed=-1)


@pytest.mark.parametrize("replicas", [1, 2, 3, 4, 6, 12])
def test_shards_concatenate_back_to_the_global_batch(replicas: int) -> None:
    batch = GlobalBatchSampler(100, 12, seed=4).batch_indices(3)
    shards = [batch[shard_rows(12, replica, replicas)] for replica in range(replicas)]
    assert all(len(shard) == 12 // replicas for shard in shards)
    np.testing.assert_array_equal(np.concatenate(shards), batch)
    for r in range(replicas):  # rows [r*B/N, (r+1)*B/N)
        assert shard_rows(12, r, replicas) == slice(r * 12 // replicas, (r + 1) * 12 // replicas)


def test_mean_of_shard_means_equals_the_global_mean() -> None:
    # Why equal shards matter: averaging per-replica mean gradients is the global-batch mean.
    rows = np.random.default_rng(0).standard_normal((24, 5))
    shard_means = [rows[shard_rows(24, r, 4)].mean(0) for r in range(4)]
    np.testing.assert_allclose(np.mean(shard_means, axis=0), rows.mean(0), rtol=1e-12)


@pytest.mark.parametrize("microbatches", [1, 2, 4, 8])
def test_microbatches_are_consecutive_slices(microbatches: int) -> None:
    batch = np.arange(8)
    pieces = [batch[microbatch_rows(8, m, microbatches)] for m in range(microbatches)]
    np.testing.assert_array_equal(np.concatenate(pieces), batch)
    assert all(len(piece) == 8 // microbatches for piece in pieces)


def test_indivisible_batch_names_batch_size_and_replicas() -> None:
    with pytest.raises(DatasetError) as raised:
        shard_rows(batch_size=10, replica=0, replicas=4)
    assert "batch_size=10" in str(raised.value)
    assert "replicas=4" in str(raised.value)
    with pytest.raises(DatasetError) as raised:
        microbatch_rows(batch_size=10, microbatch=0, microbatches=3)
    assert "batch_size=10" in str(raised.value)
    assert "microbatches=3" in str(raised.value)


@pytest.mark.parametrize(("replica", "replicas"), [(4, 4), (-1, 4), (0, 0)])
def test_replica_outside_range_is_rejected(replica: int, replicas: int) -> None:
    with pytest.raises(DatasetError, match="replica"):
        shard_rows(8, replica, replicas)
