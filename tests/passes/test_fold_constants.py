"""fold_constants: literal graph in, literal graph out."""

import numpy as np

from workbench.ir import GraphBuilder, evaluate, ops
from workbench.passes import fold_constants
from workbench.passes.fold_constants import MAX_FOLDED_BYTES


def test_folds_chains_of_constants_into_one_value():
    b = GraphBuilder()
    x = b.placeholder("x", (2,), "float64")
    scale = ops.exp(b.constant(np.array([0.0, 1.0]))) * 2.0
    graph = b.build({"y": x * scale})
    folded = fold_constants(graph)
    assert [(n.name, n.op) for n in folded.nodes] == [
        ("x", "placeholder"),
        ("constant", "constant"),
        ("exp", "constant"),
        ("constant_1", "constant"),
        ("mul", "constant"),
        ("mul_1", "mul"),
    ]
    np.testing.assert_allclose(folded.node("mul").attrs["value"], [2.0, 2.0 * np.e])
    feeds = {"x": np.array([1.0, 3.0])}
    np.testing.assert_array_equal(evaluate(folded, feeds)["y"], evaluate(graph, feeds)["y"])


def test_multi_output_fold_redirects_every_output():
    b = GraphBuilder()
    first, second = ops.split(b.constant(np.arange(5.0)), (2, 3))
    graph = fold_constants(b.build({"a": first, "b": second}))
    assert all(node.op == "constant" for node in graph.nodes)
    out = evaluate(graph, {})
    np.testing.assert_array_equal(out["b"], [2.0, 3.0, 4.0])


def test_leaves_placeholders_variables_and_updates_alone():
    b = GraphBuilder()
    w = b.variable("w", (2,), "float64")
    ops.apply_sgd(w, b.constant(np.ones(2)), b.constant(0.1), var="w")
    graph = fold_constants(b.build({"w": w * 1.0}))
    assert [n.op for n in graph.nodes] == [
        "variable",
        "constant",
        "constant",
        "apply_sgd",
        "constant",
        "mul",
    ]


def test_does_not_materialise_large_results():
    b = GraphBuilder()
    side = int(np.sqrt(MAX_FOLDED_BYTES // 8)) + 1
    big = ops.broadcast_to(b.constant(0.0), (side, side))
    graph = fold_constants(b.build({"big": big}))
    assert graph.node(big.name).op == "broadcast_to"
