"""The recompute pass: chosen layers' inner activations are dropped after forward and computed
again in backward, with bit-identical results and a lower peak of live activation bytes."""

from __future__ import annotations

import numpy as np
import pytest

from workbench.config import ConfigError, RunConfig
from workbench.ir import Executable, Graph, ops
from workbench.ir.memory import MemoryLedger
from workbench.models import Dense, Dropout, Flatten, Sequential, cnn, mlp, transformer
from workbench.optim import init_slots, make_optimizer
from workbench.passes import recompute, recompute_layers
from workbench.strategies.recomputation import check_recompute
from workbench.training.graphs import (
    DROPOUT_SEED,
    INPUTS,
    LABELS,
    LEARNING_RATE,
    build_training_graph,
)

BATCH = 8
SOURCES = ("placeholder", "constant", "variable")


class DroppedDense(Dense):
    """Dropout inside a layer, so the recomputed values include a dropout mask."""

    kind = "dropped_dense"

    def apply(self, x, params, context):
        return super().apply(ops.dropout(x, context.dropout_seed + 7, 0.4), params, context)


def _dropout_model() -> Sequential:
    layers = [Flatten(), Dense(32, "relu"), Dropout(0.3), DroppedDense(16, "tanh"), Dropout(0.2)]
    return Sequential([*layers, Dense(3)], input_shape=(2, 4))


def _feeds(model: Sequential, optimizer: bool = False) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    feeds = {
        INPUTS: rng.standard_normal((BATCH, *model.input_shape)),
        LABELS: rng.integers(0, 3, BATCH),
        DROPOUT_SEED: np.int64(12345),
    }
    if model.takes_integer_input:
        feeds[INPUTS] = rng.integers(0, 8, (BATCH, *model.input_shape))
    if optimizer:
        feeds[LEARNING_RATE] = np.float64(0.1)
    return feeds


def _state(model: Sequential) -> dict[str, np.ndarray]:
    return model.init_parameters(seed=3, dtype="float64")


def _live_activation_peak(graph: Graph) -> int:
    """The most bytes of computed values live at once when the interpreter runs ``graph``
    in order and frees each value after its last reader (feeds, constants and variables
    left out: every policy holds the same)."""
    last: dict[str, int] = {}
    for position, node in enumerate(graph.nodes):
        for value in node.inputs:
            last[value.node] = position
    kept = {value.node for value in graph.outputs.values()}
    live: dict[str, int] = {}
    peak = 0
    for position, node in enumerate(graph.nodes):
        if node.op not in SOURCES:
            live[node.name] = sum(t.nbytes for t in node.types)
        peak = max(peak, sum(live.values()))
        for value in node.inputs:
            if last[value.node] == position and value.node not in kept:
                live.pop(value.node, None)
    return peak


def test_full_recomputation_lowers_the_peak_of_live_activation_bytes():
    model = mlp((8,), 3, (32, 16))
    peaks = {
        policy: _live_activation_peak(
            build_training_graph(model, None, BATCH, "float64", recompute=policy).graph
        )
        for policy in ("none", "dense_0", "dense_1", "full")
    }
    assert peaks["full"] < peaks["none"]
    assert peaks["full"] <= min(peaks["dense_0"], peaks["dense_1"])
    assert max(peaks["dense_0"], peaks["dense_1"]) <= peaks["none"]


def test_the_measured_activation_peak_is_lower_with_full_than_with_none():
    model = mlp((8,), 3, (32, 16))
    measured = {}
    for policy in ("none", "full"):
        graph = build_training_graph(model, None, BATCH, "float64", recompute=policy).graph
        ledger = MemoryLedger()
        Executable(graph).run(_feeds(model), _state(model), ledger=ledger)
        measured[policy] = ledger.peak().by_category["activations"]
    assert 0 < measured["full"] < measured["none"]


MODELS = {
    "mlp": lambda: mlp((8,), 3, (32, 16)),
    "cnn": lambda: cnn((1, 8, 8), 3),
    "dropout": _dropout_model,
    "transformer": lambda: transformer((4, 6), 3, width=8, blocks=2),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_loss_and_every_gradient_are_bit_identical_under_every_policy(name):
    model = MODELS[name]()
    layers = [layer.name for layer in model.layers]
    policies = ["full", layers[1], ",".join(layers[::2])]
    reference = Executable(build_training_graph(model, None, BATCH, "float64").graph).run(
        _feeds(model), _state(model)
    )
    for policy in policies:
        training = build_training_graph(model, None, BATCH, "float64", recompute=policy)
        assert any(n.name.endswith("/recomputed") for n in training.graph.nodes) or policy != "full"
        got = Executable(training.graph).run(_feeds(model), _state(model))
        assert set(got) == set(reference)
        for key, value in reference.items():
            assert np.array_equal(got[key], value), (policy, key)


def test_an_optimizer_step_under_full_leaves_bit_identical_variables():
    model = _dropout_model()
    optimizer = make_optimizer("adam")
    results = []
    for policy in ("none", "full"):
        graph = build_training_graph(model, optimizer, BATCH, "float64", recompute=policy).graph
        state = {**_state(model), **init_slots(optimizer, _state(model))}
        program = Executable(graph)
        for _ in range(2):
            program.run(_feeds(model, optimizer=True), state)
        results.append(state)
    none, full = results
    assert set(none) == set(full)
    for key in none:
        assert np.array_equal(none[key], full[key]), key


def test_a_recomputed_dropout_draws_the_same_mask():
    model = _dropout_model()
    graphs = [
        build_training_graph(model, None, BATCH, "float64", recompute=policy).graph
        for policy in ("none", "dropped_dense_0")
    ]
    assert graphs[1].has_node("gradients/dropped_dense_0/dropout/recomputed")
    kept, recomputed = (Executable(g).run(_feeds(model), _state(model)) for g in graphs)
    for key, value in kept.items():
        assert np.array_equal(recomputed[key], value), key


def test_the_clones_survive_the_passes_and_backward_reads_only_them():
    training = build_training_graph(
        mlp((8,), 3, (32, 16)), None, BATCH, "float64", recompute="full"
    )
    graph = training.graph
    clones = [node for node in graph.nodes if node.name.endswith("/recomputed")]
    # Each hidden Dense recomputes its matmul and its pre-activation for relu's gradient.
    assert sorted(node.name for node in clones) == [
        "gradients/dense_0/add/recomputed",
        "gradients/dense_0/matmul/recomputed",
        "gradients/dense_1/add/recomputed",
        "gradients/dense_1/matmul/recomputed",
    ]
    readers = {
        value.node for n in graph.nodes if n.name.startswith("gradients/") for value in n.inputs
    }
    assert not readers & {"dense_0/add", "dense_1/add"}
    # Each clone comes after the whole forward pass, right before backward needs it.
    loss = [node.name for node in graph.nodes].index("softmax_cross_entropy")
    assert all([n.name for n in graph.nodes].index(c.name) > loss for c in clones)


def test_the_pass_report_lists_recompute_and_the_nodes_it_added():
    model = mlp((8,), 3, (32, 16))
    none = build_training_graph(model, None, BATCH, "float64")
    full = build_training_graph(model, None, BATCH, "float64", recompute="full")
    assert "recompute" not in str(none.report)
    (row,) = [stage for stage in full.report.stages if stage[1] == "recompute"]
    _, _, before, after = row
    assert (before, after) == (len(none.graph.nodes), len(full.graph.nodes))
    assert after - before == 4
    assert "final   recompute" in str(full.report)


def test_recompute_without_layers_returns_the_graph_unchanged():
    graph = build_training_graph(mlp((8,), 3, (16,)), None, BATCH, "float64").graph
    assert recompute(graph, []) is graph


def test_policies_name_the_layers_in_model_order():
    layers = ["flatten_0", "dense_0", "dense_1"]
    assert recompute_layers("none", layers) == ()
    assert recompute_layers("full", layers) == tuple(layers)
    assert recompute_layers("dense_1, flatten_0", layers) == ("flatten_0", "dense_1")


@pytest.mark.parametrize(
    ("policy", "bad"),
    [("dense_7", "'dense_7'"), ("dense_0,relu_0", "'relu_0'"), ("dense_0,,", "empty name")],
)
def test_a_layer_the_model_lacks_is_a_config_error_naming_the_flag_and_the_layers(policy, bad):
    model = mlp((1, 8), 3, (16,))
    with pytest.raises(ConfigError) as raised:
        check_recompute(RunConfig(recompute=policy), model)
    assert raised.value.field == "--recompute"
    message = str(raised.value)
    assert bad in message
    assert "flatten_0, dense_0, dense_1" in message


def test_the_model_parallel_plan_shows_the_recomputed_nodes():
    from workbench.notebook.graph_view import partition_figure
    from workbench.parallel.model_parallel.graph import build_model_parallel_graph

    model, devices = mlp((8,), 3, (32, 16)), ["/task:0", "/task:1"]
    optimizer = make_optimizer("sgd")
    kept = build_model_parallel_graph(model, optimizer, BATCH, "float64", devices)
    plan = build_model_parallel_graph(model, optimizer, BATCH, "float64", devices, recompute="full")
    nodes = len(kept.placed.nodes)
    assert f"then recompute, {nodes} -> {nodes + 4} nodes" in plan.describe()
    assert "recompute" not in kept.describe()
    title = partition_figure(plan.partitioned).title.text
    assert title.endswith(", 4 nodes recomputed in backward")
    assert "recomputed" not in partition_figure(kept.partitioned).title.text


def test_the_planner_counts_the_recomputed_nodes_in_a_step():
    from workbench.planner.device_costs import fixed_costs
    from workbench.planner.step_programs import one_device_step, pipeline_step
    from workbench.simulate import Compute

    model, optimizer, costs = mlp((8,), 3, (32, 16)), make_optimizer("sgd"), fixed_costs()

    def busy(programs) -> float:
        return sum(
            action.seconds
            for actions in programs.programs.values()
            for action in actions
            if isinstance(action, Compute)
        )

    kept, recomputed = (
        one_device_step(model, optimizer, BATCH, "float64", "d", costs, recompute=policy)
        for policy in ("none", "full")
    )
    graph = build_training_graph(model, optimizer, BATCH, "float64", recompute="full").graph
    clones = [n for n in graph.nodes if n.name.endswith("/recomputed")]
    extra = sum(costs.node_seconds(graph, node, "d") for node in clones)
    assert busy(recomputed) - busy(kept) == pytest.approx(extra)
    assert busy(recomputed) > busy(kept)
    devices = ["a", "b"]
    stages = [
        pipeline_step(model, optimizer, BATCH, "float64", devices, costs, 2, "1f1b", policy)
        for policy in ("none", "full")
    ]
    assert busy(stages[1]) > busy(stages[0])


def test_plan_and_what_if_refuse_an_unknown_layer_before_anything_starts():
    from workbench.launch.graph_plans import graph_plan
    from workbench.launch.what_if import plan_what_if
    from workbench.strategies import validate_config

    config = RunConfig(strategy="model-parallel", devices=2, hidden=(16,), recompute="dense_5")
    config = validate_config(config)  # as the flags' parser hands it on
    with pytest.raises(ConfigError, match="--recompute: no layer 'dense_5'"):
        graph_plan(config, mlp((1, 8, 8), 10, (16,)))
    with pytest.raises(ConfigError, match="--recompute: no layer 'dense_5'"):
        plan_what_if(config, None, progress=lambda line: pytest.fail(line))
