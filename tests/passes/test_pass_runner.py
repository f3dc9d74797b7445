"""The pass runner verifies between passes, reaches a fixed point and keeps semantics."""

import numpy as np
import pytest

from workbench.ir import Graph, GraphBuilder, Node, TensorType, Value, evaluate, gradients, ops
from workbench.passes import GraphVerificationError, run_passes, verify


def test_pipeline_shrinks_a_training_graph_and_keeps_its_results():
    rng = np.random.default_rng(0)
    b = GraphBuilder()
    x = b.placeholder("x", (8, 4), "float64")
    labels = b.placeholder("labels", (8,), "int64")
    w = b.variable("w", (4, 3), "float64")
    loss = ops.softmax_cross_entropy(ops.relu(x @ w), labels)
    (grad,) = gradients(b, loss, [w])
    graph = b.build({"loss": loss, "grad": grad})
    optimized, report = run_passes(graph, dump=True)
    assert len(optimized) < len(graph)  # the unused input gradient is pruned away
    assert {name for _, name, _, _ in report.stages} == {
        "prune",
        "fold_constants",
        "eliminate_common_subexpressions",
    }
    assert report.dumps  # a printed graph after every stage
    feeds = {"x": rng.normal(size=(8, 4)), "labels": rng.integers(0, 3, 8)}
    state = {"w": rng.normal(size=(4, 3))}
    before, after = evaluate(graph, feeds, state), evaluate(optimized, feeds, state)
    np.testing.assert_array_equal(before["grad"], after["grad"])
    assert before["loss"] == after["loss"]


def test_verifier_names_the_pass_that_broke_the_graph():
    b = GraphBuilder()
    x = b.placeholder("x", (2,), "float64")
    graph = b.build({"y": ops.exp(x)})

    def drop_inputs(g: Graph) -> Graph:
        return g.with_nodes(n for n in g.nodes if n.op != "placeholder")

    with pytest.raises(GraphVerificationError, match=r"before it is defined.*'drop_inputs'"):
        run_passes(graph, [("drop_inputs", drop_inputs)])


def test_verifier_catches_wrong_declared_types():
    bad = Node(
        "x", "placeholder", (), {"shape": (2,), "dtype": "float64"}, (TensorType((3,), "float64"),)
    )
    with pytest.raises(GraphVerificationError, match="declares"):
        verify(Graph((bad,), {"x": Value("x")}))
