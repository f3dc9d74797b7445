"""Reductions over axes: sum, mean, max, and argmax (which has no gradient)."""

from __future__ import annotations

from collections.abc import Sequence

from workbench.ir.builder import Tensor
from workbench.ir.graph import TensorType
from workbench.ir.ops._common import emit, in_float32
from workbench.ir.ops.elementwise import cast, equal
from workbench.ir.ops.shapes import broadcast_to, reshape
from workbench.ir.rules import NOT_DIFFERENTIABLE, ShapeError, define_op, normalize_axes


def _reduced_type(op: str, x: TensorType, axes, keepdims: bool, dtype: str | None = None):
    axes = normalize_axes(op, axes, len(x.shape))
    if keepdims:
        shape = tuple(1 if i in axes else s for i, s in enumerate(x.shape))
    else:
        shape = tuple(s for i, s in enumerate(x.shape) if i not in axes)
    return TensorType(shape, dtype or x.dtype)


def _reduction_shape(op: str):
    def rule(types, *, axes, keepdims):
        return _reduced_type(op, types[0], axes, keepdims)

    return rule


def _spread(gradient: Tensor, x: Tensor, axes, keepdims: bool) -> Tensor:
    """Broadcast a reduced gradient back over the reduced axes of ``x``."""
    kept = _reduced_type("reduce", x.type, axes, keepdims=True).shape
    if not keepdims and gradient.shape != kept:
        gradient = reshape(gradient, kept)
    return broadcast_to(gradient, x.shape)


def reduce_sum(x: Tensor, axes: int | Sequence[int] | None = None, keepdims: bool = False):
    return emit("sum", x, axes=_axes_attr(axes), keepdims=keepdims)


def reduce_mean(x: Tensor, axes: int | Sequence[int] | None = None, keepdims: bool = False):
    return emit("mean", x, axes=_axes_attr(axes), keepdims=keepdims)


def reduce_max(x: Tensor, axes: int | Sequence[int] | None = None, keepdims: bool = False):
    return emit("max", x, axes=_axes_attr(axes), keepdims=keepdims)


def argmax(x: Tensor, axis: int = -1) -> Tensor:
    return emit("argmax", x, axis=axis)


def _axes_attr(axes):
    if axes is None or isinstance(axes, int):
        return axes
    return tuple(int(a) for a in axes)


def _count(x: Tensor, axes) -> int:
    count = 1
    for axis in normalize_axes("mean", axes, x.ndim):
        count *= x.shape[axis]
    return count


define_op(
    "sum",
    impl=lambda xp, x, *, axes, keepdims: in_float32(
        lambda x: xp.sum(x, axis=axes, keepdims=keepdims), x
    ),
    shape=_reduction_shape("sum"),
    vjp=lambda inputs, outputs, cts, *, axes, keepdims: [
        _spread(cts[0], inputs[0], axes, keepdims)
    ],
)
define_op(
    "mean",
    impl=lambda xp, x, *, axes, keepdims: in_float32(
        lambda x: xp.mean(x, axis=axes, keepdims=keepdims), x
    ),
    shape=_reduction_shape("mean"),
    vjp=lambda inputs, outputs, cts, *, axes, keepdims: [
        _spread(cts[0] * (1.0 / _count(inputs[0], axes)), inputs[0], axes, keepdims)
    ],
)


def _max_vjp(inputs, outputs, cts, *, axes, keepdims):
    x = inputs[0]
    winners = cast(equal(x, _spread(outputs[0], x, axes, keepdims)), x.dtype)
    # Ties share the gradient equally, so the vjp stays the average of one-sided derivatives.
    share = winners / _spread(reduce_sum(winners, axes, keepdims=True), x, axes, True)
    return [_spread(cts[0], x, axes, keepdims) * share]


define_op(
    "max",
    impl=lambda xp, x, *, axes, keepdims: xp.max(x, axis=axes, keepdims=keepdims),
    shape=_reduction_shape("max"),
    vjp=_max_vjp,
)


def _argmax_shape(types, *, axis):
    (x,) = types
    if not x.shape:
        raise ShapeError(f"argmax: needs an input of rank >= 1, got {x}")
    return _reduced_type("argmax", x, axis, keepdims=False, dtype="int64")


define_op(
    "argmax",
    impl=lambda xp, x, *, axis: xp.argmax(x, axis=axis),
    shape=_argmax_shape,
    vjp=NOT_DIFFERENTIABLE,
)
