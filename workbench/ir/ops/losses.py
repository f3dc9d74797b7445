"""Softmax, one-hot and the numerically stable softmax cross-entropy loss."""

from __future__ import annotations

from workbench.ir.builder import Tensor
from workbench.ir.graph import TensorType
from workbench.ir.ops._common import emit
from workbench.ir.ops.reductions import reduce_sum
from workbench.ir.rules import NOT_DIFFERENTIABLE, ShapeError, define_op, require_float


def softmax(x: Tensor, axis: int = -1) -> Tensor:
    return emit("softmax", x, axis=axis)


def _softmax_impl(xp, x, *, axis):
    # Subtracting the max keeps exp() from overflowing; the result is unchanged.
    shifted = xp.exp(x - xp.max(x, axis=axis, keepdims=True))
    return shifted / xp.sum(shifted, axis=axis, keepdims=True)


def _softmax_shape(types, *, axis):
    require_float("softmax", types[0])
    if not -len(types[0].shape) <= axis < len(types[0].shape):
        raise ShapeError(f"softmax: axis {axis} out of range for {types[0]}")
    return types[0]


def _softmax_vjp(inputs, outputs, cts, *, axis):

    y, g = outputs[0], cts[0]
    return [y * (g - reduce_sum(g * y, axis, keepdims=True))]


define_op("softmax", impl=_softmax_impl, shape=_softmax_shape, vjp=_softmax_vjp)


def one_hot(labels: Tensor, depth: int, dtype: str) -> Tensor:
    return emit("one_hot", labels, depth=depth, dtype=dtype)


def _one_hot_shape(types, *, depth, dtype):
    (labels,) = types
    if not labels.dtype.startswith("int"):
        raise ShapeError(f"one_hot: labels must be integers, got {labels}")
    if depth < 1:
        raise ShapeError(f"one_hot: depth must be >= 1, got {depth}")
    return TensorType((*labels.shape, depth), dtype)


define_op(
    "one_hot",
    impl=lambda xp, labels, *, depth, dtype: (labels[..., None] == xp.arange(depth)).astype(dtype),
    shape=_one_hot_shape,
    vjp=NOT_DIFFERENTIABLE,
)


def softmax_cross_entropy(logits: Tensor, labels: Tensor) -> Tensor:
    """Mean over the batch of ``-log softmax(logits)[label]``; logits (N, C), labels (N,)."""
    return emit("softmax_cross_entropy", logits, labels)


def _xent_impl(xp, logits, labels):
    top = xp.max(logits, axis=-1, keepdims=True)
    log_sum = xp.log(xp.sum(xp.exp(logits - top), axis=-1)) + top[:, 0]
    picked = xp.take_along_axis(logits, labels[:, None], axis=-1)[:, 0]
    return xp.mean(log_sum - picked)


def _xent_shape(types):
    logits, labels = types
    require_float("softmax_cross_entropy", logits)
    if len(logits.shape) != 2 or labels.shape != logits.shape[:1]:
        raise ShapeError(
            f"softmax_cross_entropy: needs logits (N, C) and labels (N,), got {logits} and {labels}"
        )
    if not labels.dtype.startswith("int"):
        raise ShapeError(f"softmax_cross_entropy: labels must be integers, got {labels}")
    return TensorType((), logits.dtype)


def _xent_vjp(inputs, outputs, cts):
    logits, labels = inputs
    batch, classes = logits.shape
    scale = cts[0] * (1.0 / batch)
    return [(softmax(logits) - one_hot(labels, classes, logits.dtype)) * scale, None]


define_op("softmax_cross_entropy", impl=_xent_impl, shape=_xent_shape, vjp=_xent_vjp)
