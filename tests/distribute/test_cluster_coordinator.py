"""``ClusterCoordinator`` on a real asynchronous parameter server: closures run on whichever
worker Dask picks, each pushing on its own; the shards apply every push; errors name the
worker."""

from __future__ import annotations

import numpy as np
import pytest

import workbench
from workbench import Dense, Flatten, Sequential, StepFunctionError

pytestmark = pytest.mark.integration

CLOSURES = 16


def test_scheduled_closures_train_the_shards_asynchronously(no_leftover_processes):
    # A staleness bound: a closure that reads without pushing must not hold the others back.
    strategy = workbench.ParameterServerStrategy(devices=2, ps=2, mode="async", staleness=2)
    with strategy:
        with strategy.scope():
            model = Sequential(
                [Flatten(), Dense(32, activation="relu"), Dense(10)], input_shape=(1, 8, 8)
            )
        model.compile(steps=CLOSURES, batch_size=64, optimizer="sgd", lr=0.3, lr_decay="none")
        coordinator = workbench.ClusterCoordinator(strategy)
        dataset = strategy.experimental_distribute_dataset("digits", global_batch_size=64)
        # One worker's share of a batch, for measuring the loss without training.
        held_out = next(iter(strategy.experimental_distribute_dataset("digits", 64, seed=9)))

        def train(batch):
            x, y = batch
            loss, gradients = model.compute_gradients(x, y)
            model.optimizer_apply(gradients)
            return loss, workbench.get_replica_context().device

        def measure(batch):
            loss, _ = model.compute_gradients(*batch)  # reads, never pushes
            return loss

        before = coordinator.schedule(measure, args=(held_out.values[0],)).fetch()
        scheduled = []
        for _, batch in zip(range(CLOSURES // 2), dataset):
            for part in batch.values:  # one closure per worker's share of the batch
                scheduled.append(coordinator.schedule(train, args=(part,)))
        coordinator.join()
        assert coordinator.done()
        after = coordinator.schedule(measure, args=(held_out.values[0],)).fetch()
        results = [value.fetch() for value in scheduled]
        staleness = coordinator.staleness()

        def fails(batch):
            raise RuntimeError("bad closure")

        failing = coordinator.schedule(fails, args=(held_out.values[0],))
        with pytest.raises(StepFunctionError) as raised:
            failing.fetch()
        coordinator.schedule(fails, args=(held_out.values[0],))
        with pytest.raises(StepFunctionError):
            coordinator.join()
        variables = strategy.gather_variables()

    # Every push was applied, each within the staleness bound.
    assert len(staleness) == CLOSURES and max(staleness) <= 2
    assert after < before
    workers = {device for _, device in results}
    assert workers <= {"/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0"}
    assert "/job:worker/task:" in str(raised.value) and "RuntimeError: bad closure" in str(
        raised.value
    )
    initial = model.init_parameters(seed=0, dtype="float32")
    assert sorted(variables) == sorted(initial)
    assert not np.array_equal(variables["dense_0/kernel"], initial["dense_0/kernel"])
    pushes = [event for event in strategy.log.phases() if event.phase == "ps-push"]
    assert len([event for event in pushes if "worker" in event.device]) == CLOSURES
