"""prune: literal graph in, literal graph out."""

from workbench.ir import GraphBuilder, ops
from workbench.passes import prune


def names(graph):
    return [node.name for node in graph.nodes]


def test_keeps_only_what_outputs_need():
    b = GraphBuilder()
    x = b.placeholder("x", (2,), "float64")
    y = b.placeholder("y", (2,), "float64")
    kept = ops.exp(x)
    ops.tanh(y)  # dead
    ops.log(kept)  # dead, though it reads a live value
    graph = b.build({"out": kept * 2.0})
    assert names(prune(graph)) == ["x", "exp", "constant", "mul"]


def test_effectful_updates_and_what_they_read_survive():
    b = GraphBuilder()
    w = b.variable("w", (2,), "float64")
    g = b.placeholder("g", (2,), "float64")
    lr = b.placeholder("lr", (), "float64")
    ops.apply_sgd(w, ops.neg(g), lr, var="w")
    ops.exp(g)  # dead
    graph = b.build({})
    assert names(prune(graph)) == ["w", "g", "lr", "neg", "apply_sgd"]


def test_control_inputs_keep_their_target():
    b = GraphBuilder()
    x = b.placeholder("x", (2,), "float64")
    side = ops.exp(x)
    out = b.emit("tanh", [x], control_inputs=[side.name])
    assert names(prune(b.build({"out": out}))) == ["x", "exp", "tanh"]


def test_does_not_mutate_its_input():
    b = GraphBuilder()
    x = b.placeholder("x", (2,), "float64")
    ops.exp(x)
    graph = b.build({"x": x})
    prune(graph)
    assert names(graph) == ["x", "exp"]
