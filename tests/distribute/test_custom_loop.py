"""Custom training loops on real clusters: ``strategy.run`` over ``fit``'s batches ends with
``fit``'s variables bit for bit, a failing step function is reported and the loop goes on,
and closing leaves nothing running."""

from __future__ import annotations

import numpy as np
import pytest

import workbench
from workbench import Dense, Flatten, Sequential, StepFunctionError

pytestmark = pytest.mark.integration

# float64, two epochs' worth of the default schedule (warm-up, then cosine decay) on digits.
FIT_OPTIONS = {
    "steps": 24,  # 22 steps per epoch at batch 64: the loop crosses an epoch boundary
    "batch_size": 64,
    "dtype": "float64",
    "seed": 5,
    "optimizer": "momentum",
    "lr": 0.05,
    "warmup_steps": 3,
}


def _model() -> Sequential:
    return Sequential(
        [Flatten(), Dense(32, activation="relu"), Dense(16, activation="relu"), Dense(10)],
        input_shape=(1, 8, 8),
    )


def _train_with_a_custom_loop(strategy, steps: int, fail_at: int | None = None):
    with strategy.scope():
        model = _model()
    model.compile(**FIT_OPTIONS)
    dataset = strategy.experimental_distribute_dataset(
        "digits", global_batch_size=FIT_OPTIONS["batch_size"], seed=FIT_OPTIONS["seed"]
    )

    def step_fn(inputs):
        x, y = inputs
        loss, gradients = model.compute_gradients(x, y)
        model.optimizer_apply(gradients)
        return loss

    def broken_step_fn(inputs):
        raise ValueError("no such layer")

    losses = []
    for step, inputs in zip(range(steps), dataset):
        if step == fail_at:
            # Every replica fails before applying anything: the loop may go on.
            with pytest.raises(StepFunctionError) as raised:
                strategy.run(broken_step_fn, args=(inputs,))
            assert "/job:worker/task:" in str(raised.value)
            assert "ValueError: no such layer" in str(raised.value)
            assert "broken_step_fn" in str(raised.value)  # where in the step function
        per_replica = strategy.run(step_fn, args=(inputs,))
        assert len(strategy.experimental_local_results(per_replica)) == len(per_replica.values)
        losses.append(float(strategy.reduce("MEAN", per_replica, axis=None)))
    return model, losses


@pytest.mark.parametrize(
    ("name", "options"),
    [
        # Small buckets: many all-reduces per step, each started after the step function's
        # backward pass instead of during fit's.
        ("MirroredStrategy", {"devices": 2, "bucket_mb": 0.002}),
        ("CentralStorageStrategy", {"devices": 2}),
    ],
)
def test_a_custom_loop_ends_with_fits_variables_bit_for_bit(name, options, no_leftover_processes):
    fit_strategy = getattr(workbench, name)(**options)
    with fit_strategy.scope():
        fitted = _model()
    result = fitted.fit(**FIT_OPTIONS)

    strategy = getattr(workbench, name)(**options)
    with strategy:
        model, losses = _train_with_a_custom_loop(strategy, FIT_OPTIONS["steps"], fail_at=4)
        variables = strategy.gather_variables(optimizer_state=True)
        weights = model.get_weights()
    expected = {**result.parameters, **result.optimizer_state}
    assert sorted(variables) == sorted(expected)
    for key, value in expected.items():
        assert np.array_equal(variables[key], value), key
    assert sorted(weights) == sorted(result.parameters)
    # The losses are fit's: the mean over the replicas' slices is the global batch's loss.
    fit_losses = [event.value for event in result.log.scalars("loss")]
    np.testing.assert_allclose(losses, fit_losses, rtol=1e-12)
    phases = {event.phase for event in strategy.log.phases()}
    assert "compute" in phases and phases & {"allreduce", "ps-push"}
    # Closed: the variables stay, the loop does not.
    assert all(np.array_equal(strategy.gather_variables()[k], v) for k, v in weights.items())
    with pytest.raises(RuntimeError, match="was closed"):
        strategy.run(print)


def test_a_device_list_trains_like_a_count(no_leftover_processes):
    steps = 3
    with workbench.MirroredStrategy(devices=2) as by_count:
        _, counted = _train_with_a_custom_loop(by_count, steps)
        expected = by_count.gather_variables()
    named = workbench.MirroredStrategy(devices=["/job:worker/task:0/device:CPU:0", "/task:1"])
    with named:
        _, losses = _train_with_a_custom_loop(named, steps)
        contexts = named.run(
            lambda: (
                workbench.get_replica_context().replica_id_in_sync_group,
                workbench.get_replica_context().device,
            )
        )
        variables = named.gather_variables()
    assert contexts.values == (
        (0, "/job:worker/task:0/device:CPU:0"),
        (1, "/job:worker/task:1/device:CPU:0"),
    )
    assert losses == counted
    assert all(np.array_equal(variables[k], v) for k, v in expected.items())


def test_one_device_runs_the_step_function_here_and_matches_fit():
    model = _model()
    model.compile(**FIT_OPTIONS)  # built outside any scope: one device
    assert type(model.strategy).__name__ == "OneDeviceStrategy"
    strategy = model.strategy
    _, losses = _train_with_one(model, strategy, steps=FIT_OPTIONS["steps"])
    result = _model().fit(**FIT_OPTIONS)
    weights = model.get_weights()
    for name, value in result.parameters.items():
        np.testing.assert_allclose(weights[name], value, rtol=1e-10, atol=1e-14)
    assert losses[-1] < losses[0]


def _train_with_one(model, strategy, steps):
    dataset = strategy.experimental_distribute_dataset("digits", 64, seed=FIT_OPTIONS["seed"])
    assert strategy.num_replicas_in_sync == 1

    def step_fn(inputs):
        x, y = inputs
        loss, gradients = model.compute_gradients(x, y)
        model.optimizer_apply(gradients)
        return loss

    losses = [
        float(strategy.reduce("SUM", strategy.run(step_fn, args=(inputs,))))
        for _, inputs in zip(range(steps), dataset)
    ]
    return model, losses


def test_step_function_mistakes_are_named(no_leftover_processes):
    strategy = workbench.MirroredStrategy(devices=2)
    with strategy:
        with strategy.scope():
            model = _model()
        model.compile(steps=5, batch_size=64)
        batch = next(iter(strategy.experimental_distribute_dataset("digits", 64)))

        def too_few_rows(inputs):
            x, y = inputs
            return model.compute_gradients(x[:3], y[:3])

        with pytest.raises(StepFunctionError, match=r"x has 3 rows, but this replica's share"):
            strategy.run(too_few_rows, args=(batch,))

        def missing_gradient(inputs):
            _, gradients = model.compute_gradients(*inputs)
            gradients.pop("dense_0/bias")
            model.optimizer_apply(gradients)

        with pytest.raises(StepFunctionError, match=r"missing \['dense_0/bias'\]"):
            strategy.run(missing_gradient, args=(batch,))

        other = Sequential([Flatten(), Dense(10)], input_shape=(1, 8, 8))
        with pytest.raises(StepFunctionError, match="not those of the model the strategy"):
            strategy.run(lambda inputs: other.compute_gradients(*inputs), args=(batch,))
        # The loop is intact: no replica applied anything.
        strategy.run(
            lambda inputs: model.optimizer_apply(model.compute_gradients(*inputs)[1]), args=(batch,)
        )


def test_a_step_that_leaves_the_replicas_out_of_step_closes_the_loop(no_leftover_processes):
    strategy = workbench.MirroredStrategy(devices=2, stall_timeout=2)
    with strategy.scope():
        model = _model()
    model.compile(steps=5, batch_size=64)
    batch = next(iter(strategy.experimental_distribute_dataset("digits", 64)))

    def one_replica_gives_up(inputs):
        _, gradients = model.compute_gradients(*inputs)
        if workbench.get_replica_context().replica_id_in_sync_group == 1:
            raise RuntimeError("replica 1 gives up")
        model.optimizer_apply(gradients)  # replica 0 waits for its peer's buckets, in vain

    with pytest.raises(RuntimeError, match=r"out of step \(applied steps per replica: \[None, 0\]"):
        strategy.run(one_replica_gives_up, args=(batch,))
    with pytest.raises(RuntimeError, match="failed and was closed"):
        strategy.run(one_replica_gives_up, args=(batch,))
