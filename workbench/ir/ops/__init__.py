"""The op catalogue: importing this package registers every op's rules.

Each module groups related ops and keeps, for each, its builder function and its rule rows
(impl, shape, vjp, fold) next to each other.
"""

from workbench.ir.ops import communication, sources  # noqa: F401 - registers the rules
from workbench.ir.ops.convolution import conv2d, conv2d_filter_grad, conv2d_input_grad
from workbench.ir.ops.elementwise import (
    add,
    cast,
    div,
    equal,
    exp,
    gelu,
    greater,
    greater_equal,
    log,
    maximum,
    mul,
    neg,
    relu,
    relu_grad,
    sigmoid,
    sqrt,
    sub,
    tanh,
)
from workbench.ir.ops.embedding import embedding, embedding_grad
from workbench.ir.ops.linalg import matmul
from workbench.ir.ops.losses import one_hot, softmax, softmax_cross_entropy
from workbench.ir.ops.normalization import layer_norm
from workbench.ir.ops.pooling import (
    avg_pool2d,
    avg_pool2d_grad,
    max_pool2d,
    max_pool2d_grad,
    max_pool2d_select,
)
from workbench.ir.ops.random import dropout
from workbench.ir.ops.reductions import argmax, reduce_max, reduce_mean, reduce_sum
from workbench.ir.ops.shapes import broadcast_to, concat, pad, reshape, slice_, split, transpose
from workbench.ir.ops.state import apply_adam, apply_momentum, apply_sgd, assign

__all__ = [
    "add",
    "apply_adam",
    "apply_momentum",
    "apply_sgd",
    "argmax",
    "assign",
    "avg_pool2d",
    "avg_pool2d_grad",
    "broadcast_to",
    "cast",
    "concat",
    "conv2d",
    "conv2d_filter_grad",
    "conv2d_input_grad",
    "div",
    "dropout",
    "embedding",
    "embedding_grad",
    "equal",
    "exp",
    "gelu",
    "greater",
    "greater_equal",
    "layer_norm",
    "log",
    "matmul",
    "max_pool2d",
    "max_pool2d_grad",
    "max_pool2d_select",
    "maximum",
    "mul",
    "neg",
    "one_hot",
    "pad",
    "reduce_max",
    "reduce_mean",
    "reduce_sum",
    "relu",
    "relu_grad",
    "reshape",
    "sigmoid",
    "slice_",
    "softmax",
    "softmax_cross_entropy",
    "split",
    "sqrt",
    "sub",
    "tanh",
    "transpose",
]
