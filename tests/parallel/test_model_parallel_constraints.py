"""Device constraints written in model code decide model-parallel placement."""

import pytest

import workbench
from workbench.config import ConfigError, RunConfig
from workbench.launch.runner import run_training
from workbench.models import Dense, Flatten, Sequential


def constrained_model(head_device):
    with workbench.device("/task:0"):
        body = [Flatten(), Dense(32, activation="relu"), Dense(16, activation="relu")]
    with workbench.device(head_device):
        head = [Dense(10)]
    return Sequential(body + head, (1, 8, 8))


def test_layers_run_where_the_user_pinned_them(no_leftover_processes):
    config = RunConfig(
        strategy="model-parallel", devices=2, steps=5, dtype="float64", lr_decay="none"
    )
    result = run_training(config, progress=lambda _: None, model=constrained_model("/task:1"))
    reference = run_training(
        RunConfig(steps=5, dtype="float64", lr_decay="none"),
        progress=lambda _: None,
        model=constrained_model("/task:1"),
    )
    for name, value in reference.parameters.items():
        assert abs(result.parameters[name] - value).max() <= 1e-12 * abs(value).max()
    traffic = {d["device"]: d for d in result.summary["per_device"]}
    # Only the 16-wide activation and its gradient cross: the head lives on task 1.
    assert all(d["bytes_sent"] > 0 for d in traffic.values())


def test_a_constraint_naming_a_missing_device_fails_before_any_cluster(no_leftover_processes):
    config = RunConfig(strategy="model-parallel", devices=2, steps=5)
    with pytest.raises(ConfigError, match=r"layer dense_2: device constraint '/task:5' names no"):
        run_training(config, progress=lambda _: None, model=constrained_model("/task:5"))
