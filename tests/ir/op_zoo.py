"""One differentiable example per op: how to build it and what to feed it.

Each case names the op it exercises, the float inputs (shape), fixed non-float inputs, and a
function that builds the op's output from the input tensors. The finite-difference test and the
coverage test both read this table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from workbench.ir import ops
from workbench.ir.ops.communication import all_reduce, tensor_input


@dataclass(frozen=True)
class OpCase:
    op: str
    float_inputs: tuple[tuple[int, ...], ...]
    build: Callable
    fixed: dict = field(default_factory=dict)  # name -> array fed as a non-differentiated input
    positive: bool = False  # draw inputs away from zero (log, sqrt, div)
    id: str = ""
    # A float32 round trip quantises to ~1e-7, so it needs a wider step; the op is linear, so
    # the wide step costs no accuracy.
    step: float = 1e-6
    rtol: float = 1e-5


def _fixed(builder, name, array):
    return builder.placeholder(name, array.shape, str(array.dtype))


CASES = [
    OpCase("add", ((3, 4), (4,)), lambda b, x, y: x + y),
    OpCase("sub", ((3, 1), (3, 4)), lambda b, x, y: x - y),
    OpCase("mul", ((2, 3), (2, 3)), lambda b, x, y: x * y),
    OpCase("div", ((2, 3), (3,)), lambda b, x, y: x / y, positive=True),
    OpCase("maximum", ((4, 3), (4, 3)), lambda b, x, y: ops.maximum(x, y)),
    OpCase("neg", ((5,),), lambda b, x: -x),
    OpCase("exp", ((5,),), lambda b, x: ops.exp(x)),
    OpCase("log", ((5,),), lambda b, x: ops.log(x), positive=True),
    OpCase("sqrt", ((5,),), lambda b, x: ops.sqrt(x), positive=True),
    OpCase("tanh", ((5,),), lambda b, x: ops.tanh(x)),
    OpCase("sigmoid", ((5,),), lambda b, x: ops.sigmoid(x)),
    OpCase("relu", ((4, 5),), lambda b, x: ops.relu(x)),
    OpCase("relu_grad", ((4, 5), (4, 5)), lambda b, x, g: ops.relu_grad(x, g)),
    OpCase("gelu", ((7,),), lambda b, x: ops.gelu(x)),
    OpCase(
        "cast",
        ((3,),),
        lambda b, x: ops.cast(ops.cast(x, "float32"), "float64") * 1.0,
        id="cast-roundtrip",
        step=1e-2,
        rtol=1e-4,
    ),
    OpCase("matmul", ((3, 4), (4, 2)), lambda b, x, y: ops.matmul(x, y)),
    OpCase("matmul", ((2, 3, 4), (4, 5)), lambda b, x, y: ops.matmul(x, y), id="matmul-3d-2d"),
    OpCase("matmul", ((2, 3, 4), (2, 4, 5)), lambda b, x, y: ops.matmul(x, y), id="matmul-batch"),
    OpCase("transpose", ((2, 3, 4),), lambda b, x: ops.transpose(x, (2, 0, 1))),
    OpCase("reshape", ((2, 6),), lambda b, x: ops.reshape(x, (3, -1))),
    OpCase("broadcast_to", ((3, 1),), lambda b, x: ops.broadcast_to(x, (2, 3, 4))),
    OpCase("concat", ((2, 3), (2, 2)), lambda b, x, y: ops.concat([x, y], axis=1)),
    OpCase("split", ((5, 2),), lambda b, x: ops.split(x, (2, 3), axis=0)[1] * 2.0),
    OpCase(
        "split",
        ((5, 2),),
        lambda b, x: ops.concat(list(ops.split(x, (1, 4))), 0),
        id="split-all-outputs",
    ),
    OpCase("slice", ((4, 5),), lambda b, x: ops.slice_(x, (1, 0), (3, 4))),
    OpCase("pad", ((2, 3),), lambda b, x: ops.pad(x, ((1, 0), (2, 1)))),
    OpCase("sum", ((3, 4),), lambda b, x: ops.reduce_sum(x, axes=1)),
    OpCase(
        "sum", ((3, 4),), lambda b, x: ops.reduce_sum(x, axes=0, keepdims=True), id="sum-keepdims"
    ),
    OpCase("mean", ((3, 4),), lambda b, x: ops.reduce_mean(x, axes=(0, 1))),
    OpCase("max", ((3, 4),), lambda b, x: ops.reduce_max(x, axes=1)),
    OpCase("softmax", ((3, 5),), lambda b, x: ops.softmax(x)),
    OpCase(
        "softmax_cross_entropy",
        ((4, 3),),
        lambda b, x: ops.softmax_cross_entropy(x, _fixed(b, "labels", np.array([0, 2, 1, 2]))),
    ),
    OpCase(
        "conv2d",
        ((2, 3, 6, 5), (4, 3, 3, 3)),
        lambda b, x, w: ops.conv2d(x, w, stride=1, padding=1),
    ),
    OpCase(
        "conv2d",
        ((1, 2, 7, 7), (3, 2, 3, 2)),
        lambda b, x, w: ops.conv2d(x, w, stride=2, padding=0),
        id="conv2d-stride2",
    ),
    OpCase(
        "conv2d_input_grad",
        ((1, 2, 2, 2), (2, 1, 3, 3)),
        lambda b, g, w: ops.conv2d_input_grad(g, w, (1, 1, 6, 6), stride=2, padding=0),
        id="conv2d_input_grad-unused-rows",
    ),
    OpCase(
        "conv2d_input_grad",
        ((2, 3, 3, 3), (3, 2, 3, 3)),
        lambda b, g, w: ops.conv2d_input_grad(g, w, (2, 2, 5, 5), stride=2, padding=1),
    ),
    OpCase(
        "conv2d_filter_grad",
        ((2, 2, 5, 5), (2, 3, 3, 3)),
        lambda b, x, g: ops.conv2d_filter_grad(x, g, (3, 2, 3, 3), stride=2, padding=1),
    ),
    OpCase("max_pool2d", ((2, 2, 4, 6),), lambda b, x: ops.max_pool2d(x, 2)),
    OpCase(
        "max_pool2d",
        ((1, 1, 5, 5),),
        lambda b, x: ops.max_pool2d(x, 3, stride=1),
        id="max_pool2d-overlapping",
    ),
    OpCase(
        "max_pool2d_grad",
        ((1, 2, 4, 4), (1, 2, 2, 2)),
        lambda b, x, g: ops.max_pool2d_grad(x, g, 2, 2),
    ),
    OpCase(
        "max_pool2d_select",
        ((1, 2, 4, 4), (1, 2, 4, 4)),
        lambda b, x, h: ops.max_pool2d_select(x, h, 2, 2),
    ),
    OpCase("avg_pool2d", ((2, 1, 4, 4),), lambda b, x: ops.avg_pool2d(x, 2)),
    OpCase(
        "avg_pool2d_grad", ((2, 1, 2, 2),), lambda b, g: ops.avg_pool2d_grad(g, (2, 1, 4, 4), 2, 2)
    ),
    OpCase(
        "layer_norm", ((3, 5), (5,), (5,)), lambda b, x, gamma, beta: ops.layer_norm(x, gamma, beta)
    ),
    OpCase(
        "embedding",
        ((6, 3),),
        lambda b, table: ops.embedding(_fixed(b, "ids", np.array([[0, 5], [2, 0]])), table),
    ),
    OpCase(
        "embedding_grad",
        ((2, 2, 3),),
        lambda b, g: ops.embedding_grad(_fixed(b, "ids", np.array([[0, 5], [2, 0]])), g, 6),
    ),
    OpCase(
        "embedding",
        ((2, 3),),
        lambda b, table: ops.embedding(_fixed(b, "ids", np.array([[0, 5], [2, 3]])), table, 2),
        id="embedding-vocabulary-shard",
    ),
    OpCase(
        "embedding_grad",
        ((2, 2, 3),),
        lambda b, g: ops.embedding_grad(_fixed(b, "ids", np.array([[0, 5], [2, 3]])), g, 2, 2),
        id="embedding_grad-vocabulary-shard",
    ),
    # A group of one device: the collectives' gradient rules, without a second device.
    OpCase("all_reduce", ((2, 3),), lambda b, x: all_reduce(x, key="k", group=("d",))),
    OpCase("tensor_input", ((2, 3),), lambda b, x: tensor_input(x, key="k", group=("d",))),
    OpCase(
        "dropout",
        ((4, 6),),
        lambda b, x: ops.dropout(x, _fixed(b, "seed", np.array(7, dtype=np.int64)), 0.5),
    ),
]


def fixed_feeds(case: OpCase) -> dict:
    """Values for the ``_fixed`` placeholders each case declares, by name."""
    feeds = {}
    for name, array in (
        ("labels", np.array([0, 2, 1, 2])),
        ("ids", np.array([[0, 5], [2, 0]])),
        ("seed", np.array(7, dtype=np.int64)),
    ):
        feeds[name] = array
    return feeds
