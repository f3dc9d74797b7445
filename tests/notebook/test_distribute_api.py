"""The tf.distribute-shaped API: a model built in ``strategy.scope()`` trains with that
strategy through ``model.fit``, and options are checked like the flags."""

from __future__ import annotations

import numpy as np
import pytest

import workbench
from workbench import ConfigError, Dense, Flatten, Sequential
from workbench.store import RunStore


def _model() -> Sequential:
    return Sequential([Flatten(), Dense(16, activation="relu"), Dense(10)], input_shape=(1, 8, 8))


@pytest.mark.integration
def test_a_model_built_in_scope_fits_with_that_strategy_and_matches_one_device():
    strategy = workbench.MirroredStrategy(devices=2, allreduce="reduce-to-one")
    with strategy.scope():
        model = _model()
    assert model.strategy is strategy and workbench.distribute.current_strategy() is None
    mirrored = model.fit(steps=4, batch_size=32, dtype="float64", optimizer="sgd")
    alone = _model().fit(steps=4, batch_size=32, dtype="float64", optimizer="sgd")
    assert mirrored.summary["strategy"] == "mirrored" and mirrored.summary["devices"] == 2
    assert alone.summary["strategy"] == "one-device"
    for name, value in alone.parameters.items():
        np.testing.assert_allclose(mirrored.parameters[name], value, rtol=1e-10)


@pytest.mark.integration
def test_fit_in_the_background_returns_a_live_handle(store_root):
    run = _model().fit(steps=3, background=True)
    run.wait(120)
    assert run.state == "finished" and run.summary["steps"] == 3


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: workbench.MirroredStrategy(devices=2, stages=2), "stages"),
        (lambda: workbench.PipelineStrategy(stages=2, devices=3).config(), "--devices"),
        (lambda: workbench.MirroredStrategy(devices=2, allreduce="star").config(), "--allreduce"),
        (lambda: workbench.OneDeviceStrategy().config(epochs=0), "--epochs"),
        (lambda: workbench.OneDeviceStrategy().config(learning_rate=0.1), "learning_rate"),
        (lambda: workbench.MirroredStrategy(devices=2).config(devices=4), "devices"),
    ],
)
def test_bad_options_name_the_option(make, field):
    with pytest.raises(ConfigError) as raised:
        make()
    assert raised.value.field == field


@pytest.mark.integration
def test_a_fit_in_the_foreground_is_recorded_like_every_run(store_root):
    result = _model().fit(steps=3, batch_size=32)
    (stored,) = RunStore().runs()
    status = stored.status()
    assert status["state"] == "finished" and status["step"] == 3
    assert stored.summary()["final_loss"] == result.summary["final_loss"]
    assert [event.step for event in stored.event_log().scalars("loss")] == [0, 1, 2]
