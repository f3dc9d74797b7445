"""Shape mistakes are reported when the graph is built, naming the op, node and both shapes."""

import pytest

from workbench.ir import GraphBuilder, GraphBuildError, ShapeError, ops


def test_matmul_mismatch_names_op_node_and_both_shapes():
    b = GraphBuilder()
    x = b.placeholder("x", (256, 784), "float32")
    w = b.variable("dense/kernel", (512, 10), "float32")
    with pytest.raises(ShapeError) as error:
        ops.matmul(x, w)
    message = str(error.value)
    assert "matmul" in message and "float32[256, 784]" in message and "float32[512, 10]" in message
    assert "node 'matmul'" in message


@pytest.mark.parametrize(
    ("build", "fragment"),
    [
        (lambda b, x: x + b.placeholder("y", (3, 5), "float64"), "do not broadcast"),
        (lambda b, x: x + b.placeholder("y", (2, 3), "float32"), "share one dtype"),
        (lambda b, x: ops.reshape(x, (5, -1)), "cannot reshape"),
        (lambda b, x: ops.transpose(x, (0, 0)), "not a permutation"),
        (lambda b, x: ops.reduce_sum(x, axes=2), "out of range"),
        (lambda b, x: ops.slice_(x, (0, 0), (3, 3)), "out of range"),
        (lambda b, x: ops.concat([x, b.placeholder("y", (3, 2), "float64")], 0), "does not match"),
        (lambda b, x: ops.conv2d(x, x), "NCHW"),
        (lambda b, x: ops.max_pool2d(x), "NCHW"),
        (lambda b, x: ops.softmax_cross_entropy(x, x), "labels"),
        (lambda b, x: ops.cast(x, "complex64"), "dtype"),
        (lambda b, x: ops.dropout(x, b.placeholder("s", (), "int64"), 1.5), "rate"),
    ],
)
def test_bad_shapes_raise_at_build_time(build, fragment):
    b = GraphBuilder()
    x = b.placeholder("x", (2, 3), "float64")
    with pytest.raises(ShapeError, match=fragment):
        build(b, x)


def test_unknown_op_and_duplicate_names_are_refused():
    b = GraphBuilder()
    x = b.placeholder("x", (2,), "float64")
    with pytest.raises(GraphBuildError, match="unknown op"):
        b.emit("frobnicate", [x])
    with pytest.raises(GraphBuildError, match="used twice"):
        b.placeholder("x", (2,), "float64")


def test_tensors_from_another_graph_are_refused():
    first, second = GraphBuilder(), GraphBuilder()
    x = first.placeholder("x", (2,), "float64")
    y = second.placeholder("y", (2,), "float64")
    with pytest.raises(GraphBuildError, match="tensors of this graph"):
        second.emit("add", [x, y])
