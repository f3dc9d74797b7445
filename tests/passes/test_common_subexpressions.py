"""eliminate_common_subexpressions: literal graph in, literal graph out."""

import numpy as np

from workbench.ir import GraphBuilder, ops
from workbench.passes import eliminate_common_subexpressions as cse


def test_merges_identical_computations_and_their_readers():
    b = GraphBuilder()
    x = b.placeholder("x", (2,), "float64")
    left = ops.tanh(ops.exp(x))
    right = ops.tanh(ops.exp(x))
    graph = cse(b.build({"y": left + right}))
    assert [(n.name, n.op, [str(v) for v in n.inputs]) for n in graph.nodes] == [
        ("x", "placeholder", []),
        ("exp", "exp", ["x"]),
        ("tanh", "tanh", ["exp"]),
        ("add", "add", ["tanh", "tanh"]),
    ]


def test_constants_merge_by_value_but_attributes_keep_nodes_apart():
    b = GraphBuilder()
    x = b.placeholder("x", (3, 2), "float64")
    one, same = b.constant(np.ones(2)), b.constant(np.ones(2))
    rows, cols = ops.reduce_sum(x, axes=0), ops.reduce_sum(x, axes=1)
    graph = cse(b.build({"a": rows * one, "b": rows * same, "c": cols}))
    assert [n.name for n in graph.nodes] == ["x", "constant", "sum", "sum_1", "mul"]
    assert graph.outputs["a"] == graph.outputs["b"]


def test_never_merges_placeholders_variable_reads_or_updates():
    b = GraphBuilder()
    first = b.placeholder("first", (2,), "float64")
    second = b.placeholder("second", (2,), "float64")
    w1, w2 = b.variable("w", (2,), "float64"), b.variable("w", (2,), "float64")
    lr = b.constant(0.1)
    ops.apply_sgd(w1, first, lr, var="w")
    ops.apply_sgd(w1, first, lr, var="w")
    graph = cse(b.build({"s": first + second + w2}))
    assert [n.op for n in graph.nodes].count("apply_sgd") == 2
    assert [n.op for n in graph.nodes].count("variable") == 2
    assert [n.op for n in graph.nodes].count("placeholder") == 2
