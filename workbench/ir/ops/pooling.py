"""Max and average pooling over NCHW images (no padding), with gradient ops that close.

Max pooling routes each window's gradient to its first maximum: ``max_pool2d_grad`` scatters to
that position and ``max_pool2d_select`` gathers from it; each is the other's adjoint.
"""

from __future__ import annotations

from workbench.ir.builder import Tensor
from workbench.ir.graph import TensorType
from workbench.ir.ops._common import emit
from workbench.ir.ops._windows import scatter_windows, windows
from workbench.ir.rules import ShapeError, define_op, require_float, same_dtype


def max_pool2d(x: Tensor, size: int = 2, stride: int | None = None) -> Tensor:
    return emit("max_pool2d", x, size=size, stride=stride or size)


def avg_pool2d(x: Tensor, size: int = 2, stride: int | None = None) -> Tensor:
    return emit("avg_pool2d", x, size=size, stride=stride or size)


def _pooled_type(op: str, x: TensorType, size: int, stride: int) -> TensorType:
    require_float(op, x)
    if len(x.shape) != 4:
        raise ShapeError(f"{op}: needs an NCHW input, got {x}")
    if size < 1 or stride < 1:
        raise ShapeError(f"{op}: size and stride must be >= 1, got {size} and {stride}")
    n, c, h, w = x.shape
    if size > h or size > w:
        raise ShapeError(f"{op}: a {size}x{size} window does not fit {x}")
    return TensorType((n, c, (h - size) // stride + 1, (w - size) // stride + 1), x.dtype)


def _pool_shape(op: str):
    def rule(types, *, size, stride):
        return _pooled_type(op, types[0], size, stride)

    return rule


def _first_max_index(xp, x, size, stride):
    flat = windows(xp, x, size, size, stride)
    flat = flat.reshape(*flat.shape[:4], size * size)
    return flat, xp.argmax(flat, axis=-1)


def _max_pool_impl(xp, x, *, size, stride):
    return windows(xp, x, size, size, stride).max(axis=(4, 5))


def _max_pool_grad_impl(xp, x, g, *, size, stride):
    _, index = _first_max_index(xp, x, size, stride)
    routed = (index[..., None] == xp.arange(size * size)) * g[..., None]
    routed = routed.reshape(*routed.shape[:4], size, size).astype(x.dtype, copy=False)
    return scatter_windows(xp, routed, x.shape, stride)


def _max_pool_select_impl(xp, x, h, *, size, stride):
    _, index = _first_max_index(xp, x, size, stride)
    flat = windows(xp, h, size, size, stride)
    flat = flat.reshape(*flat.shape[:4], size * size)
    return xp.take_along_axis(flat, index[..., None], axis=-1)[..., 0]


def _grad_shape(op: str):
    def rule(types, *, size, stride):
        x, g = types
        same_dtype(op, x, g)
        expected = _pooled_type(op, x, size, stride)
        if g.shape != expected.shape:
            raise ShapeError(f"{op}: gradient {g} does not match the pooled shape {expected}")
        return x

    return rule


def _select_shape(types, *, size, stride):
    x, h = types
    if x != h:
        raise ShapeError(f"max_pool2d_select: {x} and {h} must have one type")
    return _pooled_type("max_pool2d_select", x, size, stride)


def max_pool2d_grad(x: Tensor, g: Tensor, size: int, stride: int) -> Tensor:
    return emit("max_pool2d_grad", x, g, size=size, stride=stride)


def max_pool2d_select(x: Tensor, h: Tensor, size: int, stride: int) -> Tensor:
    return emit("max_pool2d_select", x, h, size=size, stride=stride)


define_op(
    "max_pool2d",
    impl=_max_pool_impl,
    shape=_pool_shape("max_pool2d"),
    vjp=lambda inputs, outputs, cts, *, size, stride: [
        max_pool2d_grad(inputs[0], cts[0], size, stride)
    ],
)
define_op(
    "max_pool2d_grad",
    impl=_max_pool_grad_impl,
    shape=_grad_shape("max_pool2d_grad"),
    # Piecewise constant in x; linear in g with max_pool2d_select as its adjoint.
    vjp=lambda inputs, outputs, cts, *, size, stride: [
        None,
        max_pool2d_select(inputs[0], cts[0], size, stride),
    ],
)
define_op(
    "max_pool2d_select",
    impl=_max_pool_select_impl,
    shape=_select_shape,
    vjp=lambda inputs, outputs, cts, *, size, stride: [
        None,
        max_pool2d_grad(inputs[0], cts[0], size, stride),
    ],
)


def avg_pool2d_grad(g: Tensor, input_shape, size: int, stride: int) -> Tensor:
    return emit("avg_pool2d_grad", g, input_shape=tuple(input_shape), size=size, stride=stride)


def _avg_pool_impl(xp, x, *, size, stride):
    return windows(xp, x, size, size, stride).mean(axis=(4, 5))


def _avg_pool_grad_impl(xp, g, *, input_shape, size, stride):
    share = g[..., None, None] * (1.0 / (size * size))
    spread = xp.broadcast_to(share, (*g.shape, size, size)).astype(g.dtype, copy=False)
    return scatter_windows(xp, spread, input_shape, stride)


def _avg_grad_shape(types, *, input_shape, size, stride):
    (g,) = types
    expected = _pooled_type(
        "avg_pool2d_grad", TensorType(tuple(input_shape), g.dtype), size, stride
    )
    if g.shape != expected.shape:
        raise ShapeError(
            f"avg_pool2d_grad: gradient {g} does not match the pooled shape {expected}"
        )
    return TensorType(tuple(input_shape), g.dtype)


define_op(
    "avg_pool2d",
    impl=_avg_pool_impl,
    shape=_pool_shape("avg_pool2d"),
    vjp=lambda inputs, outputs, cts, *, size, stride: [
        avg_pool2d_grad(cts[0], inputs[0].shape, size, stride)
    ],
)
define_op(
    "avg_pool2d_grad",
    impl=_avg_pool_grad_impl,
    shape=_avg_grad_shape,
    vjp=lambda inputs, outputs, cts, *, input_shape, size, stride: [
        avg_pool2d(cts[0], size, stride)
    ],
)
