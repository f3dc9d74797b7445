"""Ops that move data without arithmetic: reshape, transpose, broadcast, concat, split, slice, pad.

Where NumPy can answer with a view (reshape of contiguous data, transpose, broadcast_to, slice)
the impl does, so these ops cost no copies on the hot path.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from workbench.ir.builder import Tensor
from workbench.ir.graph import TensorType
from workbench.ir.ops._common import emit, sum_to_shape, zeros_like_type
from workbench.ir.rules import ShapeError, define_op, normalize_axes, same_dtype


def reshape(x: Tensor, shape: Sequence[int]) -> Tensor:
    """Reshape; one dimension may be -1 and is inferred."""
    return emit("reshape", x, shape=tuple(int(s) for s in shape))


def _reshape_shape(types, *, shape):
    (x,) = types
    if list(shape).count(-1) > 1 or any(s < -1 for s in shape):
        raise ShapeError(f"reshape: target shape {shape} may hold one -1 and otherwise sizes >= 0")
    known = int(np.prod([s for s in shape if s != -1], dtype=np.int64))
    if -1 in shape:
        if known == 0 or x.size % known:
            raise ShapeError(f"reshape: cannot reshape {x} into {shape}")
        shape = tuple(x.size // known if s == -1 else s for s in shape)
    elif known != x.size:
        raise ShapeError(f"reshape: cannot reshape {x} ({x.size} elements) into {shape}")
    return TensorType(tuple(shape), x.dtype)


define_op(
    "reshape",
    impl=lambda xp, x, *, shape: x.reshape(shape),
    shape=_reshape_shape,
    vjp=lambda inputs, outputs, cts, *, shape: [reshape(cts[0], inputs[0].shape)],
)


def transpose(x: Tensor, perm: Sequence[int] | None = None) -> Tensor:
    """Permute axes (reverse them when ``perm`` is None)."""
    perm = tuple(reversed(range(x.ndim))) if perm is None else tuple(int(p) for p in perm)
    return emit("transpose", x, perm=perm)


def _transpose_shape(types, *, perm):
    (x,) = types
    if sorted(perm) != list(range(len(x.shape))):
        raise ShapeError(f"transpose: perm {perm} is not a permutation of the axes of {x}")
    return TensorType(tuple(x.shape[p] for p in perm), x.dtype)


define_op(
    "transpose",
    impl=lambda xp, x, *, perm: xp.transpose(x, perm),
    shape=_transpose_shape,
    vjp=lambda inputs, outputs, cts, *, perm: [transpose(cts[0], tuple(np.argsort(perm)))],
)


def broadcast_to(x: Tensor, shape: Sequence[int]) -> Tensor:
    return emit("broadcast_to", x, shape=tuple(int(s) for s in shape))


def _broadcast_to_shape(types, *, shape):
    (x,) = types
    try:
        if tuple(np.broadcast_shapes(x.shape, shape)) != tuple(shape):
            raise ValueError
    except ValueError:
        raise ShapeError(f"broadcast_to: {x} does not broadcast to {list(shape)}") from None
    return TensorType(tuple(shape), x.dtype)


define_op(
    "broadcast_to",
    impl=lambda xp, x, *, shape: xp.broadcast_to(x, shape),
    shape=_broadcast_to_shape,
    vjp=lambda inputs, outputs, cts, *, shape: [sum_to_shape(cts[0], inputs[0].shape)],
)


def concat(tensors: Sequence[Tensor], axis: int = 0) -> Tensor:
    return tensors[0].builder.emit("concat", list(tensors), axis=axis)


def _concat_shape(types, *, axis):
    if not types:
        raise ShapeError("concat: needs at least one input")
    dtype = same_dtype("concat", *types)
    ndim = len(types[0].shape)
    (axis,) = normalize_axes("concat", axis, ndim)
    for t in types:
        other = [s for i, s in enumerate(t.shape) if i != axis]
        first = [s for i, s in enumerate(types[0].shape) if i != axis]
        if len(t.shape) != ndim or other != first:
            raise ShapeError(f"concat: {t} does not match {types[0]} outside axis {axis}")
    total = sum(t.shape[axis] for t in types)
    shape = list(types[0].shape)
    shape[axis] = total
    return TensorType(tuple(shape), dtype)


def _concat_vjp(inputs, outputs, cts, *, axis):
    sizes = [x.shape[axis] for x in inputs]
    pieces = split(cts[0], sizes, axis)
    return list(pieces) if isinstance(pieces, tuple) else [pieces]


define_op(
    "concat",
    impl=lambda xp, *xs, axis: xp.concatenate(xs, axis=axis),
    shape=_concat_shape,
    vjp=_concat_vjp,
)


def split(x: Tensor, sizes: Sequence[int], axis: int = 0) -> tuple[Tensor, ...] | Tensor:
    """Split along ``axis`` into pieces of the given sizes (one output per piece)."""
    return emit("split", x, sizes=tuple(int(s) for s in sizes), axis=axis)


def _split_shape(types, *, sizes, axis):
    (x,) = types
    (axis,) = normalize_axes("split", axis, len(x.shape))
    if sum(sizes) != x.shape[axis] or any(s < 0 for s in sizes):
        raise ShapeError(f"split: sizes {list(sizes)} do not add up to axis {axis} of {x}")
    result = []
    for size in sizes:
        shape = list(x.shape)
        shape[axis] = size
        result.append(TensorType(tuple(shape), x.dtype))
    return tuple(result)


def _split_impl(xp, x, *, sizes, axis):
    return tuple(xp.split(x, np.cumsum(sizes)[:-1].tolist(), axis=axis))


def _split_vjp(inputs, outputs, cts, *, sizes, axis):
    pieces = [
        g if g is not None else zeros_like_type(inputs[0], o.type) for g, o in zip(cts, outputs)
    ]
    return [concat(pieces, axis) if len(pieces) > 1 else pieces[0]]


define_op("split", impl=_split_impl, shape=_split_shape, vjp=_split_vjp)


def slice_(x: Tensor, begin: Sequence[int], end: Sequence[int]) -> Tensor:
    """``x[begin[0]:end[0], begin[1]:end[1], ...]`` with static bounds."""
    return emit("slice", x, begin=tuple(int(b) for b in begin), end=tuple(int(e) for e in end))


def _slice_shape(types, *, begin, end):
    (x,) = types
    if len(begin) != len(x.shape) or len(end) != len(x.shape):
        raise ShapeError(f"slice: begin {begin} and end {end} need one bound per axis of {x}")
    for axis, (lo, hi, size) in enumerate(zip(begin, end, x.shape)):
        if not 0 <= lo <= hi <= size:
            raise ShapeError(f"slice: bounds [{lo}, {hi}) out of range on axis {axis} of {x}")
    return TensorType(tuple(hi - lo for lo, hi in zip(begin, end)), x.dtype)


def _slice_vjp(inputs, outputs, cts, *, begin, end):
    pads = tuple((lo, size - hi) for lo, hi, size in zip(begin, end, inputs[0].shape))
    return [pad(cts[0], pads)]


define_op(
    "slice",
    impl=lambda xp, x, *, begin, end: x[tuple(slice(lo, hi) for lo, hi in zip(begin, end))],
    shape=_slice_shape,
    vjp=_slice_vjp,
)


def pad(x: Tensor, pads: Sequence[tuple[int, int]]) -> Tensor:
    """Zero-pad each axis by ``(before, after)``."""
    return emit("pad", x, pads=tuple((int(lo), int(hi)) for lo, hi in pads))


def _pad_shape(types, *, pads):
    (x,) = types
    if len(pads) != len(x.shape) or any(lo < 0 or hi < 0 for lo, hi in pads):
        raise ShapeError(f"pad: pads {pads} need one non-negative (before, after) per axis of {x}")
    return TensorType(tuple(s + lo + hi for s, (lo, hi) in zip(x.shape, pads)), x.dtype)


def _pad_vjp(inputs, outputs, cts, *, pads):
    begin = tuple(lo for lo, _ in pads)
    end = tuple(lo + s for (lo, _), s in zip(pads, inputs[0].shape))
    return [slice_(cts[0], begin, end)]


define_op(
    "pad",
    impl=lambda xp, x, *, pads: xp.pad(x, pads),
    shape=_pad_shape,
    vjp=_pad_vjp,
)
