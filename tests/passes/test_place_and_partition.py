"""place and partition: constraints, colocation, the greedy cost model, Send/Recv pairs, and
partitions that together compute exactly what the whole graph computes."""

import threading

import numpy as np
import pytest

from workbench.costs import StaticCostModel
from workbench.ir import Executable, GraphBuilder, evaluate, gradients, ops
from workbench.ir.ops.communication import RENDEZVOUS, LocalRendezvous
from workbench.passes import PlacementError, partition, place, run_passes

DEVICES = ["/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0"]


def two_layer_graph():
    """A two-layer network with layer 1 pinned to task 0 and layer 2 to task 1."""
    b = GraphBuilder()
    x = b.placeholder("x", (4, 3), "float64")
    labels = b.placeholder("labels", (4,), "int64")
    with b.device("/task:0"):
        w1 = b.variable("w1", (3, 5), "float64")
        h = ops.relu(x @ w1)
    with b.device("/task:1"):
        w2 = b.variable("w2", (5, 2), "float64")
        loss = ops.softmax_cross_entropy(h @ w2, labels)
    grads = gradients(b, loss, [w1, w2])
    lr = b.constant(0.1)
    ops.apply_sgd(w1, grads[0], lr, var="w1")
    ops.apply_sgd(w2, grads[1], lr, var="w2")
    graph, _ = run_passes(b.build({"loss": loss}))
    return graph


def test_constraints_and_colocation_are_honoured():
    placed = place(two_layer_graph(), DEVICES)
    device = {node.name: node.device for node in placed.nodes}
    assert device["w1"] == DEVICES[0] and device["w2"] == DEVICES[1]
    updates = {n.attrs["var"]: n.device for n in placed.nodes if n.op == "apply_sgd"}
    assert updates == {"w1": DEVICES[0], "w2": DEVICES[1]}
    assert all(node.device in DEVICES for node in placed.nodes)


def test_a_constraint_naming_no_device_is_refused():
    b = GraphBuilder()
    with b.device("/task:7"):
        x = b.placeholder("x", (2,), "float64")
    with pytest.raises(PlacementError, match=r"'/task:7' names no device; devices: /job:worker"):
        place(b.build({"y": ops.exp(x)}), DEVICES)


def test_greedy_keeps_a_chain_together_when_transfers_cost_more_than_they_save():
    b = GraphBuilder()
    x = b.placeholder("x", (64, 64), "float64")
    y = ops.tanh(ops.exp(x) @ x)
    placed = place(b.build({"y": y}), DEVICES)
    assert {node.device for node in placed.nodes} == {DEVICES[0]}


def test_greedy_spreads_independent_work_when_compute_dominates():
    b = GraphBuilder()
    x = b.placeholder("x", (512, 512), "float64")
    left, right = x @ x, ops.tanh(x) @ x
    slow = StaticCostModel(flops_per_second=1e8)  # compute is expensive relative to transfers
    placed = place(b.build({"left": left, "right": right}), DEVICES, slow)
    devices = {placed.node(left.name).device, placed.node(right.name).device}
    assert devices == set(DEVICES)


def test_partition_inserts_one_send_recv_pair_per_value_and_destination():
    parts = partition(place(two_layer_graph(), DEVICES), DEVICES)
    keys = [t.key for t in parts.transfers]
    assert len(keys) == len(set(keys))
    for transfer in parts.transfers:
        sends = [
            n
            for n in parts.partitions[transfer.source].nodes
            if n.op == "send" and n.attrs["key"] == transfer.key
        ]
        recvs = [
            n
            for n in parts.partitions[transfer.target].nodes
            if n.op == "recv" and n.attrs["key"] == transfer.key
        ]
        assert len(sends) == 1 and len(recvs) == 1
    # The forward activation h crosses once even though two nodes on task 1 read it
    # (the forward matmul and the weight gradient).
    crossing = [t for t in parts.transfers if t.target == DEVICES[1]]
    assert len({t.value for t in crossing}) == len(crossing)
    assert "loss" in parts.partitions[DEVICES[1]].outputs


def run_partitions(parts, feeds, state):
    rendezvous = LocalRendezvous(timeout=10)
    results, errors = {}, []

    def run(device):
        try:
            results[device] = Executable(parts.partitions[device]).run(
                feeds, {**state, RENDEZVOUS: rendezvous}
            )
        except Exception as error:
            errors.append((device, error))

    threads = [threading.Thread(target=run, args=(d,)) for d in parts.partitions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors, errors
    return results, rendezvous


def test_partitions_together_compute_what_the_whole_graph_computes():
    graph = two_layer_graph()
    rng = np.random.default_rng(0)
    feeds = {"x": rng.normal(size=(4, 3)), "labels": np.array([0, 1, 1, 0])}
    start = {"w1": rng.normal(size=(3, 5)), "w2": rng.normal(size=(5, 2))}
    whole_state = {k: v.copy() for k, v in start.items()}
    whole = evaluate(graph, feeds, whole_state)
    parts = partition(place(graph, DEVICES), DEVICES)
    split_state = {k: v.copy() for k, v in start.items()}
    # Each device only touches its own variables; one shared dict stands in for both stores.
    results, rendezvous = run_partitions(parts, feeds, split_state)
    assert results[DEVICES[1]]["loss"] == whole["loss"]
    for name in start:
        np.testing.assert_array_equal(split_state[name], whole_state[name])
    assert rendezvous.bytes == sum(t.nbytes for t in parts.transfers)


def test_control_edges_across_devices_become_token_transfers():
    b = GraphBuilder()
    with b.device("/task:0"):
        x = b.placeholder("x", (2,), "float64")
        first = ops.exp(x)
    with b.device("/task:1"):
        w = b.variable("w", (2,), "float64")
        b.emit(
            "apply_sgd",
            [w, b.constant(np.ones(2)), b.constant(0.5)],
            var="w",
            control_inputs=[first.name],
        )
    graph = b.build({"first": first})
    parts = partition(place(graph, DEVICES), DEVICES)
    (token,) = [t for t in parts.transfers if t.value.node.startswith("token/")]
    assert token.source == DEVICES[0] and token.target == DEVICES[1] and token.nbytes == 0
    update = next(n for n in parts.partitions[DEVICES[1]].nodes if n.op == "apply_sgd")
    assert update.control_inputs == (f"recv/token/{first.name}_0/from_d0",)
    state = {"w": np.zeros(2)}
    results, _ = run_partitions(parts, {"x": np.zeros(2)}, state)
    np.testing.assert_array_equal(state["w"], [-0.5, -0.5])
    np.testing.assert_array_equal(results[DEVICES[0]]["first"], [1.0, 1.0])
