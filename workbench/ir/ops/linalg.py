"""Matrix multiplication (with shared batch dimensions, or a 2-D right operand)."""

from __future__ import annotations

from workbench.ir.builder import Tensor
from workbench.ir.graph import TensorType
from workbench.ir.ops._common import emit, in_float32, lacks_16_bit_product
from workbench.ir.ops.shapes import reshape, transpose
from workbench.ir.rules import ShapeError, define_op, require_float, same_dtype


def matmul(a: Tensor, b: Tensor) -> Tensor:
    return emit("matmul", a, b)


def _matmul_shape(types):
    a, b = types
    dtype = same_dtype("matmul", a, b)
    require_float("matmul", a)
    if len(a.shape) < 2 or len(b.shape) < 2:
        raise ShapeError(f"matmul: both operands need rank >= 2, got {a} @ {b}")
    if a.shape[-1] != b.shape[-2]:
        raise ShapeError(f"matmul: inner dimensions differ: {a} @ {b}")
    if len(b.shape) > 2 and a.shape[:-2] != b.shape[:-2]:
        raise ShapeError(f"matmul: batch dimensions differ: {a} @ {b}")
    return TensorType((*a.shape[:-1], b.shape[-1]), dtype)


def _swap_last(x: Tensor) -> Tensor:

    perm = (*range(x.ndim - 2), x.ndim - 1, x.ndim - 2)
    return transpose(x, perm)


def _matmul_vjp(inputs, outputs, cts):

    a, b = inputs
    g = cts[0]
    grad_a = matmul(g, _swap_last(b))
    if b.ndim == 2 and a.ndim > 2:
        # A shared 2-D weight collects the gradient of every batch row: fold the batch axes.
        flat_a = reshape(a, (-1, a.shape[-1]))
        flat_g = reshape(g, (-1, g.shape[-1]))
        grad_b = matmul(_swap_last(flat_a), flat_g)
    else:
        grad_b = matmul(_swap_last(a), g)
    return [grad_a, grad_b]


def _matmul_impl(xp, a, b):
    return in_float32(lambda a, b: a @ b, a, b, widen=lacks_16_bit_product(xp, a, b))


define_op("matmul", impl=_matmul_impl, shape=_matmul_shape, vjp=_matmul_vjp)
