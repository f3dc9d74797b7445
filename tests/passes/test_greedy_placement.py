"""The greedy placer on literal graphs with a hand-made cost model (literal seconds per node and
per transfer), and the schedule it predicts: where each node goes and why, in numbers."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from workbench.ir import GraphBuilder, ops
from workbench.ir.graph import Graph, Node
from workbench.passes import partition, place, predict_schedule

D0, D1 = "/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0"
DEVICES = [D0, D1]


@dataclass
class LiteralCosts:
    """``seconds[name]``: a node's time (a pair: its time on each device); every transfer
    between two devices takes ``latency + nbytes * per_byte``."""

    seconds: dict[str, float | tuple[float, float]] = field(default_factory=dict)
    latency: float = 0.1
    per_byte: float = 0.0

    def node_seconds(self, graph: Graph, node: Node, device: str) -> float:
        value = self.seconds.get(node.name, 0.0)
        return value[DEVICES.index(device)] if isinstance(value, tuple) else value

    def transfer_seconds(self, nbytes: int, source: str, destination: str) -> float:
        return 0.0 if source == destination else self.latency + nbytes * self.per_byte


def devices_of(graph: Graph) -> dict[str, str]:
    return {node.name: node.device for node in graph.nodes}


def two_branches() -> Graph:
    b = GraphBuilder()
    x = b.placeholder("x", (4,), "float64")
    left = ops.exp(x)
    right = ops.tanh(x)
    return b.build({"left": left, "right": right})


def test_two_independent_branches_go_to_two_devices():
    graph = two_branches()
    left, right = graph.outputs["left"].node, graph.outputs["right"].node
    placed = place(graph, DEVICES, LiteralCosts({left: 1.0, right: 1.0}, latency=0.1))
    where = devices_of(placed)
    # left first, on the first device; right would wait there until 1.0 and finish at 2.0,
    # while on the idle device it finishes at 0.1 (x comes over) + 1.0, + 0.1 to send it back.
    assert where[left] == D0 and where[right] == D1
    assert where["x"] == D0  # a placeholder goes with its first reader
    schedule = predict_schedule(placed, DEVICES, LiteralCosts({left: 1.0, right: 1.0}))
    assert schedule.busy == {D0: 1.0, D1: 1.0}
    assert schedule.finish[right] == pytest.approx(1.1) and schedule.seconds == 1.1


def test_the_second_branch_stays_when_moving_it_costs_more_than_waiting():
    graph = two_branches()
    left, right = graph.outputs["left"].node, graph.outputs["right"].node
    placed = place(graph, DEVICES, LiteralCosts({left: 1.0, right: 1.0}, latency=0.6))
    # 0.6 over + 1.0 + 0.6 back = 2.2 > 2.0 on the first device.
    assert set(devices_of(placed).values()) == {D0}


def chain(length: int) -> Graph:
    b = GraphBuilder()
    x = b.placeholder("x", (4,), "float64")
    for _ in range(length):
        x = ops.exp(x)
    return b.build({"y": x})


@pytest.mark.parametrize("latency", [0.0, 0.05, 5.0])
def test_a_chain_stays_on_one_device_whatever_transfers_cost(latency):
    graph = chain(4)
    seconds = {node.name: 1.0 for node in graph.nodes if node.op == "exp"}
    placed = place(graph, DEVICES, LiteralCosts(seconds, latency=latency))
    assert set(devices_of(placed).values()) == {D0}
    assert predict_schedule(placed, DEVICES, LiteralCosts(seconds)).seconds == 4.0


def test_transfers_are_charged_by_bytes_and_half_their_copy_on_each_side():
    b = GraphBuilder()
    with b.device("/task:0"):
        x = b.placeholder("x", (1000,), "float64")  # 8,000 bytes
        first = ops.exp(x)
    with b.device("/task:1"):
        second = ops.tanh(first)
    graph = b.build({"y": second})
    costs = LiteralCosts({first.name: 1.0, second.name: 1.0}, latency=0.5, per_byte=1e-4)
    schedule = predict_schedule(place(graph, DEVICES, costs), DEVICES, costs)
    # 0.8 s of copying: the sender's 0.4 after `first`, the receiver's 0.4 after the latency.
    assert schedule.start[second.name] == pytest.approx(1.0 + 0.4 + 0.5 + 0.4)
    assert schedule.busy[D0] == pytest.approx(1.4) and schedule.busy[D1] == pytest.approx(1.4)


def test_constraints_come_first_even_against_the_cost_model():
    b = GraphBuilder()
    x = b.placeholder("x", (4,), "float64")
    with b.device("/task:1"):
        pinned = ops.exp(x)
    after = ops.tanh(pinned)
    graph = b.build({"y": after})
    costs = LiteralCosts({pinned.name: (0.0, 100.0), after.name: 1.0}, latency=1.0)
    where = devices_of(place(graph, DEVICES, costs))
    assert where[pinned.name] == D1  # 100 s there, 0 s on task 0: the constraint still wins
    assert where["x"] == D1  # with its first reader
    assert where[after.name] == D1  # moving would cost a transfer for nothing


def sgd_graph(constrain_variable: bool) -> tuple[Graph, str]:
    b = GraphBuilder()
    x = b.placeholder("x", (4, 3), "float64")
    if constrain_variable:
        with b.device("/task:1"):
            w = b.variable("w", (3, 2), "float64")
    else:
        w = b.variable("w", (3, 2), "float64")
    loss = ops.reduce_sum(x @ w)
    gradient = b.constant(np.ones((3, 2)))
    update = b.emit("apply_sgd", [w, gradient, b.constant(0.1)], var="w")
    return b.build({"loss": loss}), update.name


@pytest.mark.parametrize("constrain_variable", [True, False])
def test_an_update_runs_where_its_variable_lives_even_if_slower_there(constrain_variable):
    graph, update = sgd_graph(constrain_variable)
    # The update would take 50 s on the variable's device and none on the other.
    home = D1 if constrain_variable else D0
    slow_at_home = (50.0, 0.0) if home == D0 else (0.0, 50.0)
    placed = place(graph, DEVICES, LiteralCosts({update: slow_at_home}))
    where = devices_of(placed)
    assert where["w"] == home and where[update] == home


def gradient_graph() -> tuple[Graph, str, str]:
    """A forward node pinned to task 1 and a node named as its gradient."""
    b = GraphBuilder()
    x = b.placeholder("x", (4,), "float64")
    with b.device("/task:1"):
        forward = ops.exp(x)
    with b.scope("gradients"), b.scope(forward.name):
        backward = ops.tanh(x)
    return b.build({"f": forward, "g": backward}), forward.name, backward.name


def test_gradients_follow_their_forward_node_only_when_asked():
    graph, forward, backward = gradient_graph()
    assert backward == f"gradients/{forward}/tanh"
    costs = LiteralCosts({forward: 1.0, backward: 1.0})
    colocated = devices_of(place(graph, DEVICES, costs, colocate_gradients=True))
    assert colocated[backward] == colocated[forward] == D1
    free = devices_of(place(graph, DEVICES, costs, colocate_gradients=False))
    # Free, it runs beside the forward node instead of after it.
    assert free[forward] == D1 and free[backward] == D0


@pytest.mark.parametrize(("on_task_1", "expected"), [(0.9, D0), (0.5, D1)])
def test_measured_times_within_noise_tie_to_the_lowest_device(on_task_1, expected):
    graph = chain(1)
    (node,) = [n for n in graph.nodes if n.op == "exp"]
    # 10% faster on task 1 is calibration noise, not a reason to move; twice as fast is.
    placed = place(graph, DEVICES, LiteralCosts({node.name: (1.0, on_task_1)}))
    assert devices_of(placed)[node.name] == expected


def test_a_placeholder_fed_everywhere_is_copied_not_sent():
    b = GraphBuilder()
    x = b.placeholder("x", (4,), "float64")
    with b.device("/task:0"):
        left = ops.exp(x)
    with b.device("/task:1"):
        right = ops.tanh(x)
    graph = b.build({"left": left, "right": right})
    sent = partition(place(graph, DEVICES), DEVICES)
    fed = partition(place(graph, DEVICES, fed_everywhere=["x"]), DEVICES, fed_everywhere=["x"])
    assert [t.key for t in sent.transfers] == [f"x->{D1}"]
    assert fed.transfers == ()
    for part in fed.partitions.values():
        assert [n.name for n in part.nodes if n.op == "placeholder"] == ["x"]


def test_a_send_follows_the_node_that_makes_the_value():
    b = GraphBuilder()
    with b.device("/task:0"):
        x = b.placeholder("x", (4,), "float64")
        made = ops.exp(x)
        later = ops.tanh(ops.tanh(x))  # task 0 goes on after making the value
    with b.device("/task:1"):
        reader = ops.relu(made)
    graph = b.build({"later": later, "reader": reader})
    order = [n.name for n in partition(place(graph, DEVICES), DEVICES).partitions[D0].nodes]
    assert order.index(f"send/{made.name}_0/to_d1") == order.index(made.name) + 1


def test_a_device_may_get_no_nodes():
    placed = place(chain(3), DEVICES, LiteralCosts({}, latency=1.0))
    parts = partition(placed, DEVICES)
    assert parts.partitions[D1].nodes == () and parts.transfers == ()
    assert predict_schedule(placed, DEVICES, LiteralCosts()).busy[D1] == 0.0
