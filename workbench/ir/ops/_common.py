"""Helpers the op modules share: emitting nodes, lifting scalars, undoing broadcasting."""

from __future__ import annotations

from typing import Any

import numpy as np

from workbench.ir.builder import Tensor
from workbench.ir.graph import TensorType
from workbench.ir.rules import ShapeError


def emit(op: str, *inputs: Tensor, **attrs: Any) -> Any:
    """Add ``op`` to the graph of its first tensor input."""
    return inputs[0].builder.emit(op, list(inputs), **attrs)


def lift(reference: Tensor, value: Any) -> Tensor:
    """Turn a Python number into a constant of ``reference``'s dtype; pass tensors through."""
    if isinstance(value, Tensor):
        return value
    return reference.builder.constant(np.asarray(value, dtype=reference.dtype))


def broadcast_types(op: str, a: TensorType, b: TensorType) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(a.shape, b.shape))
    except ValueError:
        raise ShapeError(f"{op}: shapes {a} and {b} do not broadcast") from None


def sum_to_shape(gradient: Tensor, shape: tuple[int, ...]) -> Tensor:
    """Sum a broadcast gradient back down to ``shape`` (the vjp of implicit broadcasting)."""
    if gradient.shape == shape:
        return gradient
    # Ops emitted by name: the modules of reduce_sum and reshape use this helper themselves.
    extra = gradient.ndim - len(shape)
    axes = list(range(extra))
    axes += [
        extra + i for i, size in enumerate(shape) if size == 1 and gradient.shape[extra + i] != 1
    ]
    reduced = emit("sum", gradient, axes=tuple(axes), keepdims=False) if axes else gradient
    return reduced if reduced.shape == shape else emit("reshape", reduced, shape=tuple(shape))


def zeros_like_type(reference: Tensor, type_: TensorType) -> Tensor:
    """A zero tensor of ``type_`` built as a broadcast scalar, so folding it stays cheap."""
    zero = reference.builder.constant(np.zeros((), dtype=type_.dtype))
    return emit("broadcast_to", zero, shape=tuple(int(s) for s in type_.shape))


def in_float32(compute: Any, *arrays: Any, widen: bool = True) -> Any:
    """``compute(*arrays)``, in float32 when the arrays are 16-bit and ``widen`` says so,
    rounded back to their dtype (docs/guide/command-line.md, "Mixed precision").

    Reductions and layer norm widen on every device: a sum of many 16-bit terms loses the small
    ones. Products widen where no 16-bit kernel computes them (:func:`lacks_16_bit_product`)."""
    dtype = arrays[0].dtype
    if not widen or dtype.itemsize != 2 or dtype.kind not in "fV":
        return compute(*arrays)
    return compute(*(array.astype(np.float32) for array in arrays)).astype(dtype)


def lacks_16_bit_product(xp: Any, *arrays: Any) -> bool:
    """Whether ``xp`` has no 16-bit kernel for the product of ``arrays``: NumPy has no 16-bit
    BLAS (its float16 product is a plain loop, bfloat16's goes through float32 element by
    element, so one float32 GEMM is faster and closer to what a GPU gives); CuPy multiplies
    float16 and bfloat16 matrices with cuBLAS, but its batched product has no bfloat16 kernel
    (CuPy 14: "data type 'E' not understood")."""
    if xp is np:
        return True
    return arrays[0].dtype.name == "bfloat16" and any(array.ndim > 2 for array in arrays)
