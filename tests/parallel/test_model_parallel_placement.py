"""``--placement`` for model parallelism: greedy by the cost model (the default), the
parameter-balanced split, or the model's constraints; the option's checks; the plan's
predicted costs; and a greedy run that splits the backward pass over two devices and ends
with exactly the one-device parameters."""

from __future__ import annotations

import numpy as np
import pytest

import workbench
from workbench.cli.main import main
from workbench.config import ConfigError, RunConfig
from workbench.costs import StaticCostModel
from workbench.data import load_dataset
from workbench.launch.runner import prepare_run, run_training
from workbench.models import Dense, Flatten, Sequential, build_model
from workbench.optim import make_optimizer
from workbench.parallel.model_parallel.graph import build_model_parallel_graph
from workbench.parallel.pipeline.stages import split_layers
from workbench.store import STORE_ENVIRONMENT
from workbench.strategies import validate_config
from workbench.strategies.options import ModelParallelOptions

D0, D1 = "/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0"
# Digits (64 features), one 1024-wide pair: at batch 1024 the fixed rates see the weight
# gradient of dense_1 (2 GFLOP, 24 ms at 90 GFLOP/s) finish sooner on the idle device, even
# with both operands over and the 8 MiB gradient back (about 14 ms of transfers).
WIDE = {"hidden": (1024, 1024), "batch_size": 1024}


def mlp(hidden, dataset="digits"):
    data = load_dataset(dataset, seed=0)
    return build_model("mlp", data.input_shape, data.num_classes, hidden)


def plan(model, placement, batch=32, dtype="float32", cost=None):
    return build_model_parallel_graph(
        model, make_optimizer("momentum"), batch, dtype, [D0, D1], placement, cost
    )


def test_an_unknown_placement_names_the_flag_and_the_choices():
    config = RunConfig(strategy="model-parallel", devices=2, placement="random")
    with pytest.raises(
        ConfigError,
        match=r"--placement: unknown placement 'random'; choose one of: greedy, "
        r"balanced-params, manual",
    ):
        validate_config(config)


def test_placement_belongs_to_model_parallel():
    with pytest.raises(ConfigError, match=r"--placement: applies to model-parallel"):
        validate_config(RunConfig(strategy="mirrored", devices=2, placement="greedy"))
    config = validate_config(RunConfig(strategy="model-parallel", devices=2))
    assert config.options_of(ModelParallelOptions).placement == "greedy"


def test_manual_placement_without_constraints_is_refused_before_anything_starts(capsys):
    config = RunConfig(strategy="model-parallel", devices=2, placement="manual", steps=2)
    with pytest.raises(ConfigError, match=r"--placement: manual .* no layer has one") as caught:
        prepare_run(config)
    assert "workbench.device" in str(caught.value) and "--placement greedy" in str(caught.value)
    flags = ["--strategy", "model-parallel", "--devices", "2", "--placement", "manual"]
    assert main(["plan", *flags]) == 2
    assert "--placement: manual" in capsys.readouterr().err


def test_balanced_params_is_the_contiguous_parameter_split_with_gradients_colocated():
    model = mlp((16, 16, 16))
    placed = plan(model, "balanced-params")
    groups = split_layers(model, 2)
    expected = {
        model.layers[i].name: (D0, D1)[g] for g, layers in enumerate(groups) for i in layers
    }
    assert dict(placed.layer_devices) == expected
    for node in placed.placed.nodes:
        layer = node.name.removeprefix("gradients/").split("/")[0]
        if node.name.startswith("gradients/") and layer in expected:
            assert node.device == expected[layer], node.name
    assert placed.backward_devices == {}


def test_manual_placement_follows_the_constraints():
    with workbench.device("/task:1"):
        body = [Flatten(), Dense(16, activation="relu")]
    model = Sequential([*body, Dense(10)], (1, 8, 8))  # the head follows the layer before
    placed = plan(model, "manual")
    assert set(dict(placed.layer_devices).values()) == {D1}


def test_greedy_on_fixed_rates_keeps_a_small_model_on_one_device():
    placed = plan(mlp((32, 16)), "greedy", cost=StaticCostModel())
    assert {node.device for node in placed.placed.nodes} == {D0}
    assert placed.partitioned.partitions[D1].nodes == ()
    assert placed.prediction.schedule.busy[D1] == 0.0


def test_greedy_runs_a_big_weight_gradient_beside_the_input_gradient():
    model = mlp(WIDE["hidden"])
    greedy = plan(model, "greedy", WIDE["batch_size"], cost=StaticCostModel())
    balanced = plan(model, "balanced-params", WIDE["batch_size"], cost=StaticCostModel())
    device = {node.name: node.device for node in greedy.placed.nodes}
    assert device["dense_1/matmul"] == device["gradients/dense_1/matmul/matmul"] == D0
    assert device["gradients/dense_1/matmul/matmul_1"] == D1  # the weight gradient
    assert device["update/apply_momentum_2"] == device["dense_1/kernel"] == D0  # its update
    assert greedy.backward_devices["dense_1"] == (D0, D1)
    # What the cost model predicts for each, and why: both devices busy at once.
    g, b = greedy.prediction.schedule, balanced.prediction.schedule
    assert g.seconds < 0.8 * b.seconds
    assert sum(g.busy.values()) - g.seconds > 0.3 * g.seconds
    # Every cross-device input is a Send/Recv pair, each with its predicted seconds.
    keys = [t.key for t in greedy.partitioned.transfers]
    assert set(greedy.prediction.transfer_seconds) == set(keys) and keys


@pytest.mark.integration
def test_the_plan_prints_busy_time_transfer_costs_and_the_cost_model(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv(STORE_ENVIRONMENT, str(tmp_path))  # no calibration cached there
    flags = ["--strategy", "model-parallel", "--devices", "2", "--hidden", "1024,1024"]
    assert main(["plan", *flags, "--batch-size", "1024"]) == 0
    out = capsys.readouterr().out
    assert "fixed rates: 90 GFLOP/s, 2.2 GB/s and 2 ms a message" in out
    assert "no calibration of a local 2-device CPU cluster is cached" in out
    assert f"{D0}  busy" in out and f"{D1}  busy" in out and "ms of work in a" in out
    sends = [line for line in out.splitlines() if line.startswith("  gradients/dense_1")]
    assert sends and all(line.endswith(" ms") and " bytes, " in line for line in sends)
    assert "(backward on " in out


@pytest.mark.integration
def test_the_plan_uses_the_cached_calibration_of_the_local_cluster(tmp_path, monkeypatch, capsys):
    from workbench.calibration.probe import cluster_signature
    from workbench.costs import Calibration, LinkFit, link_key
    from workbench.store import RunStore

    monkeypatch.setenv(STORE_ENVIRONMENT, str(tmp_path))
    signature = cluster_signature("cpu", [D0, D1], ["127.0.0.1", "127.0.0.1"])
    links = {link_key(D0, D1): LinkFit(1e-4, 1e9), link_key(D1, D0): LinkFit(1e-4, 1e9)}
    calibration = Calibration(signature, (D0, D1), {D0: {}, D1: {}}, links)
    RunStore(tmp_path).save_calibration(signature, calibration.to_json())
    assert main(["plan", "--strategy", "model-parallel", "--devices", "2"]) == 0
    out = capsys.readouterr().out
    assert "the cached calibration of the local 2-device CPU cluster, measured:" in out
    assert "links 0.100 ms + 1.0 GB/s" in out


@pytest.mark.integration
@pytest.mark.usefixtures("no_leftover_processes")
def test_a_greedy_run_splits_the_backward_pass_and_ends_with_the_one_device_parameters(
    tmp_path, monkeypatch
):
    # An empty run store and --no-calibrate: fixed rates, so the placement is the one above.
    monkeypatch.setenv(STORE_ENVIRONMENT, str(tmp_path))
    common = {"dtype": "float64", "lr_decay": "none", "steps": 3, **WIDE}
    result = run_training(
        RunConfig(strategy="model-parallel", devices=2, no_calibrate=True, **common),
        progress=lambda _: None,
    )
    reference = run_training(RunConfig(**common), progress=lambda _: None)
    assert result.summary["placement"] == "greedy"
    for name, value in reference.parameters.items():
        np.testing.assert_array_equal(result.parameters[name], value, err_msg=name)
    assert result.summary["final_loss"] == reference.summary["final_loss"]
    # The weight gradient went over: task 1 received both operands and sent the gradient.
    traffic = {d["device"]: d for d in result.summary["per_device"]}
    gradient = 1024 * 1024 * 8
    assert traffic[D1]["bytes_sent"] >= 3 * gradient
    assert traffic[D1]["bytes_received"] > 0
