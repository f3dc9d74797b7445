"""2-D convolution (NCHW input, OIHW filter) and its two gradient ops.

The forward pass is im2col by strided views followed by one tensordot (a GEMM). The gradient
ops close under differentiation: ``conv2d_input_grad`` is the adjoint of ``conv2d`` in its
input and ``conv2d_filter_grad`` the adjoint in its filter, so every vjp below is written with
these three ops and higher derivatives come for free.
"""

from __future__ import annotations

import numpy as np

from workbench.ir.builder import Tensor
from workbench.ir.graph import TensorType
from workbench.ir.ops._common import emit, in_float32
from workbench.ir.ops._windows import crop, output_size, pad_image, scatter_windows, windows
from workbench.ir.rules import ShapeError, define_op, require_float, same_dtype


def conv2d(x: Tensor, w: Tensor, stride: int = 1, padding: int = 0) -> Tensor:
    return emit("conv2d", x, w, stride=stride, padding=padding)


def conv2d_input_grad(g: Tensor, w: Tensor, input_shape, stride: int, padding: int) -> Tensor:
    return emit(
        "conv2d_input_grad", g, w, input_shape=tuple(input_shape), stride=stride, padding=padding
    )


def conv2d_filter_grad(x: Tensor, g: Tensor, filter_shape, stride: int, padding: int) -> Tensor:
    return emit(
        "conv2d_filter_grad", x, g, filter_shape=tuple(filter_shape), stride=stride, padding=padding
    )


def _output_type(op, x_shape, w_shape, dtype, stride, padding) -> TensorType:
    if len(x_shape) != 4 or len(w_shape) != 4:
        raise ShapeError(f"{op}: needs input NCHW and filter OIHW, got {x_shape} and {w_shape}")
    if stride < 1 or padding < 0:
        raise ShapeError(f"{op}: stride must be >= 1 and padding >= 0, got {stride}, {padding}")
    n, c, h, w = x_shape
    o, c_in, kh, kw = w_shape
    if c != c_in:
        raise ShapeError(f"{op}: input has {c} channels but the filter expects {c_in}")
    oh, ow = output_size(h, kh, stride, padding), output_size(w, kw, stride, padding)
    if oh < 1 or ow < 1:
        raise ShapeError(f"{op}: a {kh}x{kw} filter does not fit a {h}x{w} input")
    return TensorType((n, o, oh, ow), dtype)


def _conv2d_shape(types, *, stride, padding):
    x, w = types
    require_float("conv2d", x)
    return _output_type("conv2d", x.shape, w.shape, same_dtype("conv2d", x, w), stride, padding)


def _tensordot(xp, a, b, axes):
    # The convolutions' GEMM: widened on NumPy only (CuPy's tensordot is one 2-D cuBLAS
    # product, bfloat16 included; see lacks_16_bit_product).
    return in_float32(lambda a, b: xp.tensordot(a, b, axes=axes), a, b, widen=xp is np)


def _conv2d_impl(xp, x, w, *, stride, padding):
    _, _, kh, kw = w.shape
    cols = windows(xp, pad_image(xp, x, padding), kh, kw, stride)  # N, C, OH, OW, KH, KW
    out = _tensordot(xp, cols, w, ((1, 4, 5), (1, 2, 3)))  # N, OH, OW, O
    return xp.ascontiguousarray(out.transpose(0, 3, 1, 2))


def _conv2d_vjp(inputs, outputs, cts, *, stride, padding):
    x, w = inputs
    g = cts[0]
    return [
        conv2d_input_grad(g, w, x.shape, stride, padding),
        conv2d_filter_grad(x, g, w.shape, stride, padding),
    ]


define_op("conv2d", impl=_conv2d_impl, shape=_conv2d_shape, vjp=_conv2d_vjp)


def _input_grad_shape(types, *, input_shape, stride, padding):
    g, w = types
    expected = _output_type("conv2d_input_grad", input_shape, w.shape, g.dtype, stride, padding)
    if expected.shape != g.shape:
        raise ShapeError(f"conv2d_input_grad: gradient {g} does not match output {expected}")
    return TensorType(tuple(input_shape), same_dtype("conv2d_input_grad", g, w))


def _input_grad_impl(xp, g, w, *, input_shape, stride, padding):
    n, c, h, width = input_shape
    cols = _tensordot(xp, g, w, ((1,), (0,)))  # N, OH, OW, C, KH, KW
    cols = cols.transpose(0, 3, 1, 2, 4, 5)
    padded = scatter_windows(xp, cols, (n, c, h + 2 * padding, width + 2 * padding), stride)
    return xp.ascontiguousarray(crop(padded, padding))


def _input_grad_vjp(inputs, outputs, cts, *, input_shape, stride, padding):
    g, w = inputs
    h = cts[0]
    return [conv2d(h, w, stride, padding), conv2d_filter_grad(h, g, w.shape, stride, padding)]


define_op("conv2d_input_grad", impl=_input_grad_impl, shape=_input_grad_shape, vjp=_input_grad_vjp)


def _filter_grad_shape(types, *, filter_shape, stride, padding):
    x, g = types
    expected = _output_type("conv2d_filter_grad", x.shape, filter_shape, g.dtype, stride, padding)
    if expected.shape != g.shape:
        raise ShapeError(f"conv2d_filter_grad: gradient {g} does not match output {expected}")
    return TensorType(tuple(filter_shape), same_dtype("conv2d_filter_grad", x, g))


def _filter_grad_impl(xp, x, g, *, filter_shape, stride, padding):
    _, _, kh, kw = filter_shape
    cols = windows(xp, pad_image(xp, x, padding), kh, kw, stride)  # N, C, OH, OW, KH, KW
    return _tensordot(xp, g, cols, ((0, 2, 3), (0, 2, 3)))  # O, C, KH, KW


def _filter_grad_vjp(inputs, outputs, cts, *, filter_shape, stride, padding):
    x, g = inputs
    h = cts[0]
    return [conv2d_input_grad(g, h, x.shape, stride, padding), conv2d(x, h, stride, padding)]


define_op(
    "conv2d_filter_grad", impl=_filter_grad_impl, shape=_filter_grad_shape, vjp=_filter_grad_vjp
)
