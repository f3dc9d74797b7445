"""The pieces of sharded data parallelism that need no cluster: the checkpoint layout cut
into every rank's shards and joined back, and the stage-3 graph rewrite (each parameter read
before its first forward reader and again before its first backward reader)."""

import numpy as np

from workbench.config import RunConfig
from workbench.ir import Executable
from workbench.launch.calibrate import model_for
from workbench.optim import Adam, init_slots
from workbench.parallel.collectives import plan_buckets
from workbench.parallel.data_parallel.gathered_reads import (
    BACKWARD,
    gathered_reads,
    reads_per_pass,
)
from workbench.parallel.data_parallel.shards import ShardLayout, join_shards, shard_values
from workbench.training.graphs import INPUTS, LABELS, build_training_graph


def test_shards_of_every_rank_join_back_into_the_checkpoint_layout():
    rng = np.random.default_rng(0)
    parameters = {"a/kernel": rng.normal(size=(3, 4)), "a/bias": rng.normal(size=5)}
    slots = init_slots(Adam(), parameters)
    for name, value in slots.items():
        slots[name] = np.full_like(value, 7) if value.ndim == 0 else rng.normal(size=value.shape)
    # 17 elements in buckets of at most 12: [a/bias], [a/kernel]; 3 ranks, uneven chunks.
    layout = ShardLayout(tuple(plan_buckets({k: v.shape for k, v in parameters.items()}, 8, 96)), 3)
    assert [bucket.names for bucket in layout.buckets] == [("a/bias",), ("a/kernel",)]
    snapshots = []
    for rank in range(3):
        shards, shard_slots = shard_values(layout, rank, parameters, slots)
        assert sum(value.size for value in shards.values()) < 17  # a share, not everything
        snapshots.append({"parameters": shards, "optimizer_state": shard_slots})
    joined_parameters, joined_slots = join_shards(layout, snapshots)
    assert joined_parameters.keys() == parameters.keys()
    for name, value in parameters.items():
        assert joined_parameters[name].tobytes() == value.tobytes()
    assert joined_slots.keys() == slots.keys()
    for name, value in slots.items():
        assert np.array_equal(joined_slots[name], value), name


def test_stage_three_reads_each_parameter_where_each_pass_needs_it():
    model = model_for(RunConfig(hidden=(32, 16)))
    graph = build_training_graph(model, None, 8, "float64").graph
    rewritten = gathered_reads(graph)
    position = {node.name: index for index, node in enumerate(rewritten.nodes)}
    reads = {node.attrs["var"]: node for node in rewritten.nodes if node.op == "variable"}
    # Forward reads sit just before their first reader, not all at the top.
    assert position["dense_1/kernel"] == position["dense_1/matmul"] - 1
    # Backward reads weights again (the input gradient's transpose), never biases, and the
    # first layer's kernel not at all (no gradient flows into the inputs).
    assert set(reads) - set(model.parameter_shapes()) == {
        "dense_1/kernel" + BACKWARD,
        "dense_2/kernel" + BACKWARD,
    }
    transpose = rewritten.node("gradients/dense_2/matmul/transpose")
    assert transpose.inputs[0].node == reads["dense_2/kernel" + BACKWARD].name
    assert reads_per_pass(rewritten)[("dense_2/kernel", True)] == 1
    # The rewritten graph computes what the original computes.
    parameters = model.init_parameters(0, "float64")
    store = {**parameters, **{name + BACKWARD: value for name, value in parameters.items()}}
    rng = np.random.default_rng(1)
    feeds = {INPUTS: rng.normal(size=(8, 8, 8)), LABELS: rng.integers(0, 10, size=8)}
    before = Executable(graph).run(feeds, parameters)
    after = Executable(rewritten).run(feeds, store)
    assert before.keys() == after.keys()
    for key, value in before.items():
        assert np.asarray(after[key]).tobytes() == np.asarray(value).tobytes(), key
