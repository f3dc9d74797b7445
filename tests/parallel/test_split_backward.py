"""Zero-bubble's split backward: a stage's input-gradient half then its weight-gradient half
compute bit for bit what its whole backward computes, on every stage of the MLP and the
transformer, with and without recomputation (pure graphs, no cluster)."""

import numpy as np
import pytest

from workbench.ir import Executable
from workbench.models import mlp, transformer
from workbench.parallel.pipeline.stages import (
    INPUT_GRADIENT,
    KEPT,
    OUTPUT_GRADIENT,
    STAGE_INPUT,
    build_stage_graphs,
    chunk_layers,
    split_backward,
    split_layers,
)
from workbench.training.graphs import DROPOUT_SEED, LABELS

MICROBATCH = 4
MODELS = {
    "mlp": mlp((64,), 10, (32, 16, 16)),
    "transformer": transformer((8, 8), 10, width=16, blocks=2),
}


def _feeds(model, layers, last, rng) -> dict:
    """Random inputs for a stage: its input, labels on the last, an incoming gradient."""
    shape = (MICROBATCH, *model.shapes[layers.start])
    feeds = {STAGE_INPUT: rng.standard_normal(shape)}
    if last:
        feeds[LABELS] = rng.integers(0, 10, MICROBATCH)
    else:
        outgoing = (MICROBATCH, *model.shapes[layers.stop])
        feeds[OUTPUT_GRADIENT] = rng.standard_normal(outgoing)
    if model.uses_dropout:
        feeds[DROPOUT_SEED] = np.int64(7)
    return feeds


@pytest.mark.parametrize("recompute", ["none", "full"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_input_then_weight_half_is_the_whole_backward_bit_for_bit(name, recompute):
    model = MODELS[name]
    rng = np.random.default_rng(0)
    state = model.init_parameters(0, "float64")
    stages = split_layers(model, 3)
    for index, layers in enumerate(stages):
        first, last = index == 0, index == len(stages) - 1
        graphs = build_stage_graphs(model, layers, MICROBATCH, "float64", first, last, recompute)
        feeds = _feeds(model, layers, last, rng)
        stashed = Executable(graphs.forward).run(feeds, state)
        feeds.update({key: stashed[key] for key in graphs.stash})
        whole = Executable(graphs.backward).run(feeds, state)

        halves = split_backward(graphs.backward)
        if first:
            # Nothing to send back: the weight half is the whole backward.
            assert halves.input_gradient is None and halves.kept == ()
            separate = Executable(halves.weight_gradient).run(feeds, state)
        else:
            assert halves.input_gradient is not None
            given = Executable(halves.input_gradient).run(feeds, state)
            assert set(given) == {INPUT_GRADIENT, *halves.kept}
            assert all(key.startswith(KEPT + "/") for key in halves.kept)
            kept = {key: given[key] for key in halves.kept}
            separate = {INPUT_GRADIENT: given[INPUT_GRADIENT]}
            separate.update(Executable(halves.weight_gradient).run({**feeds, **kept}, state))
        assert separate.keys() == whole.keys()
        for key, expected in whole.items():
            np.testing.assert_array_equal(separate[key], expected, err_msg=f"{name} {key}")


def test_each_node_of_the_backward_runs_in_one_half_only():
    """What the weight half does is not done again: the halves' computing nodes are the
    backward's, once each (recomputation included)."""
    model = MODELS["mlp"]
    layers = split_layers(model, 2)[1]
    graphs = build_stage_graphs(model, layers, MICROBATCH, "float64", False, True, "full")
    halves = split_backward(graphs.backward)
    assert halves.input_gradient is not None

    def computing(graph) -> list[str]:
        return [n.name for n in graph.nodes if n.op not in ("placeholder", "constant", "variable")]

    both = computing(halves.input_gradient) + computing(halves.weight_gradient)
    assert sorted(both) == sorted(computing(graphs.backward))
    # The weight half holds the parameter gradients' matmuls (what fills the bubble).
    assert any(n.op == "matmul" for n in halves.weight_gradient.nodes)


def test_interleaved_chunks_take_every_layer_once_round_robin():
    model = mlp((64,), 10, (16, 16, 16))
    stages, virtual = 2, 2
    chunks = split_layers(model, stages * virtual)
    on_device = [chunk_layers(model, stages, virtual, stage) for stage in range(stages)]
    # Model chunk k = c * P + s sits on device s as its local chunk c.
    for k, layers in enumerate(chunks):
        assert on_device[k % stages][k // stages] == layers
