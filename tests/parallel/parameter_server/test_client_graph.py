"""The parameter-server client graph as the master builds it: variables and updates on the
shards, towers on the workers, and a Send/Recv pair on exactly the edges the placement cuts
(no Dask here: graphs in, partitions out)."""

import numpy as np
import pytest

from workbench.ir import Executable
from workbench.ir.ops.communication import RENDEZVOUS
from workbench.models import Dense, Sequential
from workbench.models.layers import Embedding
from workbench.models.presets import mlp
from workbench.models.transformer import TokenMean
from workbench.optim import make_optimizer
from workbench.parallel.parameter_server.client_graph import (
    applies_plain_sgd,
    build_parameter_server_graph,
    learning_rate_feed,
)
from workbench.parallel.parameter_server.messages import decode_push, encode_push
from workbench.parallel.parameter_server.partitioner import place_variables
from workbench.parallel.parameter_server.table_rendezvous import TableRendezvous
from workbench.training.graphs import INPUTS, LABELS

WORKERS = [f"/job:worker/task:{t}/device:CPU:0" for t in range(3)]
SHARDS = [f"/job:ps/task:{t}/device:CPU:0" for t in range(3)]


def ps_graph(model, workers=1, shards=2, in_graph=False, min_bytes=None, batch=8):
    pieces = place_variables(model.parameter_shapes(), shards, 8, min_bytes)
    return build_parameter_server_graph(
        model,
        make_optimizer("momentum"),
        batch,
        "float64",
        WORKERS[:workers],
        SHARDS[:shards],
        pieces,
        in_graph=in_graph,
    )


def cut_edges(graph):
    """(value, device it is needed on) for every edge between nodes on different devices."""
    where = {node.name: node.device for node in graph.nodes}
    return {
        (str(value), where[node.name])
        for node in graph.nodes
        for value in node.inputs
        if where[value.node] != where[node.name]
    }


@pytest.mark.parametrize("in_graph", [False, True], ids=["between-graph", "in-graph"])
@pytest.mark.parametrize("shards", [1, 2, 3])
def test_send_recv_pairs_are_exactly_the_cut_edges(shards, in_graph):
    graph = ps_graph(mlp((1, 8, 8), 10, (32, 16)), 3 if in_graph else 1, shards, in_graph)
    transfers = graph.partitioned.transfers
    assert {(str(t.value), t.target) for t in transfers} == cut_edges(graph.placed)
    assert len(transfers) == len(cut_edges(graph.placed))  # one pair per edge, no more
    for device, part in graph.partitioned.partitions.items():
        keys = {t.key for t in transfers}
        sends = {n.attrs["key"] for n in part.nodes if n.op == "send"}
        recvs = {n.attrs["key"] for n in part.nodes if n.op == "recv"}
        assert sends == {t.key for t in transfers if t.source == device} <= keys
        assert recvs == {t.key for t in transfers if t.target == device}


def test_variables_and_updates_live_on_the_shards_and_the_compute_on_the_workers():
    graph = ps_graph(mlp((1, 8, 8), 10, (32, 16)), shards=2)
    for node in graph.placed.nodes:
        on_shard = node.device in SHARDS
        if node.op in ("variable",) or node.op.startswith("apply_"):
            assert on_shard, node.name
        elif node.op in ("matmul", "softmax_cross_entropy", "relu"):
            assert not on_shard, node.name
    # Pulls carry variable reads from shards, pushes carry gradients back: nothing else.
    for shard in range(2):
        pulled = {t.value.node for t in graph.pulls(shard, 0)}
        pushed_to = {t.target for t in graph.pushes(shard, 0)}
        assert pulled == {p.name for p in graph.pieces if p.shard == shard}
        assert pushed_to == {SHARDS[shard]}
        assert len(graph.pushes(shard, 0)) == len(graph.pulls(shard, 0))


def test_in_graph_towers_share_the_shards_add_n():
    graph = ps_graph(mlp((1, 8, 8), 10, (32, 16)), workers=3, shards=1, in_graph=True)
    towers = {node.name.split("/")[0] for node in graph.placed.nodes if node.device in WORKERS}
    assert towers == {"tower_0", "tower_1", "tower_2"}
    shard = graph.apply_program(0)
    recvs = shard.nodes_with_op("recv")
    assert {n.attrs["source"] for n in recvs} == set(WORKERS)
    assert len(recvs) == 3 * len(graph.pieces)  # every tower's gradient of every variable


def test_a_partitioned_variable_is_split_over_shards_and_joined_on_the_worker():
    model = mlp((1, 8, 8), 10, (32, 16))
    graph = ps_graph(model, shards=3, min_bytes=4096)  # dense_0/kernel: 16 KiB -> 3 parts
    parts = [p for p in graph.pieces if p.variable == "dense_0/kernel"]
    assert [p.rows for p in parts] == [(0, 22), (22, 43), (43, 64)]
    assert len({p.shard for p in parts}) == 3
    worker = graph.worker_program(0)
    (join,) = [n for n in worker.nodes if n.op == "concat"]
    assert len(join.inputs) == 3
    # Each part's gradient goes back to its own shard.
    for part in parts:
        pushed = [t for t in graph.pushes(part.shard, 0) if "concat" in t.key]
        assert len(pushed) == 1 and pushed[0].shape == part.shape


def embedding_model(vocabulary=1000, tokens=4):
    return Sequential(
        [Embedding(vocabulary, 8), TokenMean(), Dense(5)], input_shape=(tokens,), name="bag"
    )


def test_embedding_gradients_travel_as_touched_rows_only():
    model = embedding_model()
    graph = ps_graph(model, shards=2, min_bytes=8 * 8 * 100, batch=16)  # 64 KB table -> 2 parts
    assert graph.row_sparse, "the table's part gradients should be row-sparse"
    params = model.init_parameters(0, "float64")
    rendezvous = TableRendezvous()
    for shard in range(2):
        for transfer in graph.pulls(shard, 0):
            piece = next(p for p in graph.pieces if p.name == transfer.value.node)
            begin, end = piece.rows
            value = params[piece.variable]
            rendezvous.received[transfer.key] = value[begin:end] if piece.is_part else value
    ids = np.array([[1, 2, 3, 3], [900, 2, 1, 1]] * 8, dtype=np.int64)
    labels = np.zeros(16, dtype=np.int64)
    Executable(graph.worker_program(0)).run({INPUTS: ids, LABELS: labels}, {RENDEZVOUS: rendezvous})
    touched = set()
    for shard in range(2):
        transfers = graph.pushes(shard, 0)
        message = encode_push(rendezvous.sent, transfers, graph.row_sparse)
        decoded = decode_push(message, transfers)
        for position, transfer in enumerate(transfers):
            np.testing.assert_array_equal(decoded[position], rendezvous.sent[transfer.key])
            if transfer.key in graph.row_sparse:
                indices, rows = message.others[position]
                assert rows.shape == (len(indices), 8)
                part = next(p for p in graph.pieces if p.shard == shard and p.is_part)
                touched |= {int(i) + part.rows[0] for i in indices}
        assert message.nbytes < sum(t.nbytes for t in transfers)
    assert touched == {1, 2, 3, 900}  # the rows the batch looked up, and only those


def _one_shard_graph(optimizer: str, dtype: str = "float32"):
    model = mlp((1, 8, 8), 10, (32, 16))
    pieces = place_variables(model.parameter_shapes(), 1, 4)
    graph = build_parameter_server_graph(
        model, make_optimizer(optimizer), 8, dtype, WORKERS[:1], SHARDS[:1], pieces
    )
    return model, graph


@pytest.mark.parametrize("optimizer", ["sgd", "momentum", "adam"])
def test_only_plain_sgd_may_carry_an_async_pushs_scale_in_its_learning_rate(optimizer):
    # Momentum's and Adam's slots would keep the gradient's scale: the fold is SGD's alone.
    _, graph = _one_shard_graph(optimizer)
    assert applies_plain_sgd(graph.apply_program(0)) is (optimizer == "sgd")


@pytest.mark.parametrize("workers", [2, 4])
def test_an_async_push_scaled_through_the_learning_rate_updates_to_the_same_bits(workers):
    """What the shard does for async plain SGD (the push unscaled, 1/N in the rate) moves
    the variables to the same float32 bits as scaling the push, for N a power of two."""
    model, graph = _one_shard_graph("sgd")
    program = Executable(graph.apply_program(0))
    transfers = graph.pushes(0, 0)
    rng = np.random.default_rng(0)
    pushed = {t.key: rng.standard_normal(t.shape).astype(np.float32) for t in transfers}
    rate, scale = np.float32(0.0317), np.float32(1.0 / workers)
    updated = []
    for gradients, fed_rate in (
        ({key: value * scale for key, value in pushed.items()}, rate),
        (pushed, np.float32(rate * scale)),
    ):
        rendezvous = TableRendezvous()
        rendezvous.received = dict(gradients)
        state = {**model.init_parameters(0, "float32"), RENDEZVOUS: rendezvous}
        program.run({learning_rate_feed(0): np.asarray(fed_rate)}, state)
        updated.append({name: state[name] for name in model.parameter_shapes()})
    scaled, folded = updated
    for name, value in scaled.items():
        np.testing.assert_array_equal(folded[name], value, err_msg=name)
    assert any(
        not np.array_equal(value, model.init_parameters(0, "float32")[name])
        for name, value in scaled.items()
    )
