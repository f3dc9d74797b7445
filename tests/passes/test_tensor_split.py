"""The tensor-parallel split (``workbench/passes/tensor_split.py``): the ranks' programs, run
as threads that meet in an in-process all-reduce, compute the one-device loss and, joined,
the one-device gradients (float64, within 1e-10), for the MLP, the transformer preset and an
embedding model, at 2 and 4 ranks; what cannot be split is a SplitError naming the node and
op, and a degree that does not divide a layer is a ConfigError naming the flag."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from workbench.config import ConfigError
from workbench.ir import Executable, Graph, GraphBuilder, Value, gradients, ops
from workbench.ir.ops.communication import COLLECTIVES, LocalCollectives
from workbench.models import Dense, Dropout, Embedding, LayerNorm, Sequential, mlp, transformer
from workbench.models.transformer import TokenMean
from workbench.optim import make_optimizer
from workbench.parallel.tensor_parallel.graph import forward_graph, rank_training_graph
from workbench.parallel.tensor_parallel.plan import tensor_plan
from workbench.parallel.tensor_parallel.shards import join_state, rank_state
from workbench.passes.tensor_split import (
    ParameterSplit,
    SplitError,
    join_rank_shards,
    shard_of,
    split_for_rank,
)

BATCH = 6


def digits_batch(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"inputs": rng.normal(size=(BATCH, 1, 8, 8)), "labels": rng.integers(0, 10, BATCH)}


def tokens_batch(vocabulary: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    # Every id of the vocabulary appears, so every rank's range is looked up.
    ids = rng.permutation(np.resize(np.arange(vocabulary), BATCH * 5)).reshape(BATCH, 5)
    return {"inputs": ids, "labels": rng.integers(0, 3, BATCH)}


def embedding_model() -> Sequential:
    return Sequential(
        [Embedding(12, 8), TokenMean(), Dense(16, "relu"), Dense(8), Dense(3)], input_shape=(5,)
    )


def one_device(model: Sequential, feeds: dict, params: dict) -> dict:
    graph = forward_graph(model, BATCH, "float64")
    names = list(model.parameter_shapes())
    return Executable(_with_gradients(graph, names)).run(feeds, dict(params))


def _with_gradients(graph: Graph, names: list[str]) -> Graph:
    builder = GraphBuilder(graph)
    loss = builder.tensor(graph.outputs["loss"])
    grads = gradients(builder, loss, [builder.tensor(Value(name)) for name in names])
    return builder.build({"loss": loss, **{f"grad/{n}": g for n, g in zip(names, grads)}})


def run_ranks(model: Sequential, tp: int, feeds: dict, params: dict):
    """Each rank's split step (loss and gradients) in its own thread; their results in rank
    order and the in-process hub they all-reduced through."""
    plan = tensor_plan(model, tp)
    forward = forward_graph(model, BATCH, "float64")
    names = list(model.parameter_shapes())
    hub = LocalCollectives(tp)
    results: list[dict] = [{} for _ in range(tp)]
    failures: list[BaseException] = []

    def rank(r: int) -> None:
        try:
            graph = rank_training_graph(model, None, forward, plan, r, tp, ())
            state = {n: shard_of(params[n], plan[n], r, tp) for n in names}
            results[r] = Executable(graph).run(feeds, {**state, COLLECTIVES: hub.member(r)})
        except BaseException as error:  # reported by the test's thread
            failures.append(error)

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(tp)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not failures, failures
    return plan, results, hub


def assert_ranks_equal_one_device(model: Sequential, tp: int, feeds: dict) -> LocalCollectives:
    params = model.init_parameters(seed=3, dtype="float64")
    expected = one_device(model, feeds, params)
    plan, results, hub = run_ranks(model, tp, feeds, params)
    for result in results:
        assert result["loss"] == pytest.approx(expected["loss"], rel=1e-10)
    split = [name for name, how in plan.items() if how.axis is not None]
    assert split, "nothing was split"
    for name in model.parameter_shapes():
        want = expected[f"grad/{name}"]
        got = join_rank_shards([result[f"grad/{name}"] for result in results], plan[name])
        assert got.shape == want.shape, name
        assert np.max(np.abs(got - want)) <= 1e-10 * np.max(np.abs(want)), name
        if plan[name].axis is None:
            # A replicated variable's gradient is the same on every rank (to the bit): its
            # copies stay equal step after step.
            for result in results[1:]:
                np.testing.assert_array_equal(result[f"grad/{name}"], results[0][f"grad/{name}"])
    return hub


@pytest.mark.parametrize("tp", [2, 4])
def test_the_mlps_ranks_compute_the_one_device_loss_and_gradients(tp):
    hub = assert_ranks_equal_one_device(mlp((1, 8, 8), 10, (32, 16)), tp, digits_batch())
    # One Dense pair whose input is the data: one all-reduce forward (the row half's partial
    # sums, batch x 16), none backward (nothing below needs the input's gradient).
    assert [key.rsplit("/", 1)[-1] for key in hub.keys] == ["all_reduce"]
    assert hub.bytes == tp * BATCH * 16 * 8


def test_a_second_pair_all_reduces_its_inputs_gradient_in_backward():
    hub = assert_ranks_equal_one_device(mlp((1, 8, 8), 10, (16, 8, 16, 8)), 2, digits_batch())
    # Two pairs: each joins its row half forward (batch x 8); the second pair's input comes
    # from the first pair, so its gradient (batch x 8) is all-reduced backward.
    assert [key.rsplit("/", 2)[-2:] for key in hub.keys] == [
        ["matmul", "all_reduce"],
        ["matmul", "all_reduce"],
        ["tensor_input", "grad"],
    ]
    assert hub.bytes == 2 * 3 * BATCH * 8 * 8


@pytest.mark.parametrize("tp", [2, 4])
def test_the_transformers_ranks_compute_the_one_device_loss_and_gradients(tp):
    hub = assert_ranks_equal_one_device(transformer((1, 8, 8), 10), tp, digits_batch())
    # Per block: attention and MLP each all-reduce their output forward and their input's
    # gradient backward, every one an activation of batch x 8 tokens x width 32.
    forward = [key for key in hub.keys if not key.endswith("/grad")]
    backward = [key for key in hub.keys if key.endswith("/grad")]
    assert (len(forward), len(backward)) == (4, 4)
    assert hub.bytes == tp * 8 * BATCH * 8 * 32 * 8


@pytest.mark.parametrize("tp", [2, 4])
def test_a_vocabulary_split_embedding_computes_the_one_device_loss_and_gradients(tp):
    model = embedding_model()
    assert tensor_plan(model, tp)["embedding_0/embeddings"] == ParameterSplit("vocabulary", 0)
    assert_ranks_equal_one_device(model, tp, tokens_batch(12))


def test_ops_outside_a_split_region_run_whole_and_dropout_inside_is_refused():
    def layers_graph(layers) -> Graph:
        model = Sequential([*layers], input_shape=(8,))
        return forward_graph(model, BATCH, "float64"), model

    plan = {
        "dense_0/kernel": ParameterSplit("column", 1),
        "dense_0/bias": ParameterSplit("column", 0),
    }
    graph, _ = layers_graph([Dense(8, "relu"), LayerNorm(), Dense(4)])
    with pytest.raises(SplitError, match=r"'layer_norm_0/layer_norm' \(layer_norm\)"):
        split_for_rank(graph, plan, 0, 2)
    graph, _ = layers_graph([Dense(8, "relu"), Dropout(0.5), Dense(4)])
    with pytest.raises(SplitError, match=r"dropout_0/dropout.*\(dropout\)"):
        split_for_rank(graph, plan, 0, 2)
    graph, _ = layers_graph([Dense(8)])
    with pytest.raises(SplitError, match=r"\(softmax_cross_entropy\)"):
        split_for_rank(graph, plan, 0, 2)


def test_a_reshape_that_scatters_a_rank_slice_is_refused():
    builder = GraphBuilder()
    x = builder.placeholder("x", (2, 4), "float64")
    h = x @ builder.variable("w", (4, 6), "float64")
    # (2, 6) -> (12,) keeps each rank's columns apart in every row: not one contiguous slice.
    graph = builder.build({"y": ops.reduce_sum(ops.reshape(h, (12,)))})
    with pytest.raises(SplitError, match=r"\(reshape\)"):
        split_for_rank(graph, {"w": ParameterSplit("column", 1)}, 1, 2)


def test_a_degree_that_does_not_divide_a_layer_is_a_config_error_naming_the_flag():
    with pytest.raises(ConfigError, match=r"--tp: 3 tensor-parallel ranks.*dense_0's 32 units"):
        tensor_plan(mlp((1, 8, 8), 10, (32, 16)), 3)
    with pytest.raises(ConfigError, match=r"--mesh: .*transformer_0's 4 attention heads"):
        tensor_plan(transformer((1, 8, 8), 10), 8, flag="--mesh")
    with pytest.raises(ConfigError, match=r"--tp: .*vocabulary of 12"):
        tensor_plan(embedding_model(), 5)
    # The unpaired classifier is replicated: 10 classes need not divide.
    assert tensor_plan(mlp((1, 8, 8), 10, (32, 16)), 4)["dense_2/kernel"].axis is None
    with pytest.raises(ConfigError, match="--tp: no layer of dense_0 splits"):
        tensor_plan(Sequential([Dense(4)], input_shape=(8,)), 2)


def test_a_stage_of_layers_splits_only_its_own_pairs():
    model = mlp((8,), 3, (16, 8, 8))
    plan = tensor_plan(model, 2, range(2, 4))
    assert {name: split.role for name, split in plan.items() if split.axis is not None} == {
        "dense_2/kernel": "column",
        "dense_2/bias": "column",
        "dense_3/kernel": "row",
    }


def test_optimizer_slots_split_with_their_parameters_and_join_back_whole():
    model = mlp((8,), 3, (16, 8))
    plan = tensor_plan(model, 2)
    params = model.init_parameters(seed=0, dtype="float64")
    rng = np.random.default_rng(0)
    slots = {
        **{f"{n}/adam_m": rng.normal(size=v.shape) for n, v in params.items()},
        **{f"{n}/adam_t": np.array(7) for n in params},
    }
    ranks = [rank_state(params, slots, plan, r, 2) for r in range(2)]
    assert ranks[1][0]["dense_0/kernel"].shape == (8, 8)
    assert ranks[1][1]["dense_0/kernel/adam_m"].shape == (8, 8)
    assert ranks[1][1]["dense_1/kernel/adam_m"].shape == (8, 8)
    snapshots = [{"parameters": p, "optimizer_state": s} for p, s in ranks]
    joined, joined_slots = join_state(snapshots, plan)
    for name, value in params.items():
        np.testing.assert_array_equal(joined[name], value)
    for name, value in slots.items():
        np.testing.assert_array_equal(joined_slots[name], value)


def test_an_updating_rank_program_updates_its_shard_in_place():
    model = mlp((8,), 3, (16, 8))
    forward = forward_graph(model, BATCH, "float64")
    graph = rank_training_graph(
        model, make_optimizer("sgd"), forward, tensor_plan(model, 2), 1, 2, ()
    )
    updates = {n.attrs["var"]: n for n in graph.nodes if n.op == "apply_sgd"}
    assert graph.type_of(updates["dense_0/kernel"].inputs[0]).shape == (8, 8)
    assert graph.type_of(updates["dense_1/kernel"].inputs[0]).shape == (8, 8)
    assert graph.type_of(updates["dense_2/kernel"].inputs[0]).shape == (8, 3)
