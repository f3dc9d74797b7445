"""Bad input to the custom-loop surface is refused by name before any cluster work."""

from __future__ import annotations

import numpy as np
import pytest

import workbench
import workbench.distribute.strategy as strategy_module
from workbench import ConfigError, Dense, Flatten, PerReplica, Sequential


@pytest.fixture
def no_cluster(monkeypatch):
    """Any attempt to start a custom loop's cluster fails the test."""

    def refuse(*args, **kwargs):
        raise AssertionError("a cluster was started")

    monkeypatch.setattr(strategy_module, "ClusterLoop", refuse)


def _model() -> Sequential:
    return Sequential([Flatten(), Dense(10)], input_shape=(1, 8, 8))


def test_device_lists_count_the_devices_in_rank_order():
    written = ["/task:0", "task:1", "/job:worker/task:2/device:CPU:0", "task3-cpu0"]
    strategy = workbench.MirroredStrategy(devices=written)
    assert strategy.settings["devices"] == 4 and strategy.num_replicas_in_sync == 4
    assert strategy.config(batch_size=64).devices == 4
    gpus = workbench.MirroredStrategy(devices=["/job:worker/task:0/device:GPU:0"])
    assert gpus.settings["device_type"] == "gpu"
    workers = workbench.ParameterServerStrategy(devices=["/task:0", "/task:1"], ps=2)
    assert workers.num_replicas_in_sync == 2


@pytest.mark.parametrize(
    ("devices", "options", "says"),
    [
        (["/task:0", "/task:7"], {}, "'/task:7' names no device of MirroredStrategy with 2"),
        (["/task:0", "/job:ps/task:0"], {}, "its devices are /job:worker/task:0/device:CPU:0"),
        (["/device:CPU:0"], {}, "'/device:CPU:0' names no device"),
        (["/task:0", "task:0"], {}, "'task:0' names task:0 again (as '/task:0' before)"),
        (["/task:1", "/task:0"], {}, "must name task:0, task:1 in that order"),
        (
            ["/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:GPU:0"],
            {},
            "mixes CPU and GPU",
        ),
        (["/job:worker/task:0/device:GPU:0"], {"device_type": "cpu"}, "names no device"),
        ([], {}, "an empty list"),
        ([0, 1], {}, "expected device names"),
    ],
)
def test_bad_device_lists_name_devices_the_name_and_the_devices(devices, options, says):
    with pytest.raises(ConfigError) as raised:
        workbench.MirroredStrategy(devices=devices, **options)
    assert raised.value.field == "devices"
    assert says in str(raised.value)


def test_a_parameter_server_list_names_workers_not_shards():
    with pytest.raises(ConfigError) as raised:
        workbench.ParameterServerStrategy(devices=["/task:0", "/job:ps/task:0"], ps=1)
    assert raised.value.field == "devices"
    assert "/job:ps/task:0/device:CPU:0 is a parameter server" in str(raised.value)


def test_run_with_a_per_replica_of_the_wrong_length_is_refused_before_the_cluster(no_cluster):
    strategy = workbench.MirroredStrategy(devices=2)
    with strategy.scope():
        model = _model()
    model.compile(steps=2, batch_size=64)
    for args, kwargs, field in [
        ((PerReplica((1, 2, 3)),), {}, "args"),
        (([PerReplica((1,))],), {}, "args"),
        ((), {"batch": {"x": PerReplica((1, 2, 3))}}, "kwargs"),
        (5, {}, "args"),
    ]:
        with pytest.raises(ConfigError) as raised:
            strategy.run(lambda *a, **k: None, args=args, kwargs=kwargs)
        assert raised.value.field == field
    with pytest.raises(ConfigError, match="holds 3 values, but the strategy has 2 replicas"):
        strategy.run(print, args=(PerReplica((1, 2, 3)),))


def test_custom_loops_say_where_they_run(no_cluster):
    pipeline = workbench.PipelineStrategy(devices=2, stages=2)
    with pytest.raises(ConfigError, match="pipeline trains with fit") as raised:
        pipeline.run(print)
    assert raised.value.field == "strategy"
    parameter_server = workbench.ParameterServerStrategy(devices=2, mode="async")
    with pytest.raises(ConfigError, match="ClusterCoordinator"):
        parameter_server.run(print)
    in_graph = workbench.MirroredStrategy(devices=2, replication="in-graph")
    with pytest.raises(ConfigError) as raised:
        in_graph.run(print)
    assert raised.value.field == "replication"
    with pytest.raises(RuntimeError, match=r"model.compile"):
        workbench.MirroredStrategy(devices=2).run(print)


def test_the_coordinator_takes_async_parameter_servers_only(no_cluster):
    with pytest.raises(ConfigError) as raised:
        workbench.ClusterCoordinator(workbench.MirroredStrategy(devices=2))
    assert raised.value.field == "strategy"
    with pytest.raises(ConfigError) as raised:
        workbench.ClusterCoordinator(workbench.ParameterServerStrategy(devices=2))
    assert raised.value.field == "mode" and "mode='async'" in str(raised.value)
    strategy = workbench.ParameterServerStrategy(devices=2, mode="async")
    with strategy.scope():
        _model().compile(steps=2, batch_size=64)
    with pytest.raises(ConfigError) as raised:
        workbench.ClusterCoordinator(strategy).schedule(print, args=(PerReplica((1, 2)),))
    assert raised.value.field == "args"


def test_compile_checks_fit_options_and_refuses_what_a_loop_cannot_honour(no_cluster):
    strategy = workbench.MirroredStrategy(devices=2)
    with strategy.scope():
        model = _model()
    for options, field in [
        ({"optimizer": "rmsprop"}, "--optimizer"),
        ({"batch_size": 63}, "--batch-size"),
        ({"learning_rate": 0.1}, "learning_rate"),
        ({"save": "somewhere"}, "save"),
        ({"checkpoint_every": 5}, "checkpoint_every"),
        ({"tensorboard": "tb"}, "tensorboard"),
    ]:
        with pytest.raises(ConfigError) as raised:
            model.compile(**options)
        assert raised.value.field == field
    wrong_shape = Sequential([Dense(10)], input_shape=(3,))
    with pytest.raises(ConfigError) as raised:
        strategy.compile_model(wrong_shape, {})
    assert raised.value.field == "model"


def test_model_calls_outside_a_step_function_say_where_they_belong():
    model = _model()
    with pytest.raises(RuntimeError, match=r"inside a step function given to strategy.run"):
        model.compute_gradients(np.zeros((4, 1, 8, 8)), np.zeros(4, dtype=np.int64))
    with pytest.raises(RuntimeError, match=r"model.compile"):
        model.get_weights()
    model.compile(steps=3, dtype="float64", seed=4)
    initial = model.get_weights()
    expected = model.init_parameters(seed=4, dtype="float64")
    assert all(np.array_equal(initial[name], expected[name]) for name in expected)
