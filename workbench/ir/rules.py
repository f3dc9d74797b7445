"""The op catalogue and its rule tables, one table per concern, keyed by op name.

Adding an op means calling :func:`define_op` once with its rows side by side:

- ``impl(xp, *inputs, **attrs)`` computes the outputs with the array module ``xp`` (NumPy or
  CuPy); it returns one array, or a tuple for multi-output ops. Stateful ops also receive
  ``state=`` (the device's variable store, a dict of arrays).
- ``shape(input_types, **attrs)`` returns the tuple of output :class:`TensorType`; it raises
  :class:`ShapeError` when the inputs do not fit, which the builder reports with the node name.
- ``vjp(inputs, outputs, cotangents, **attrs)`` builds, from graph tensors, one cotangent per
  input (``None`` where there is none). ``NOT_DIFFERENTIABLE`` marks ops that have no gradient
  on purpose (comparisons, integer ops, state updates); the coverage test insists every op says
  one or the other.
- ``fold(arrays, **attrs)`` evaluates the op on constant NumPy inputs during constant folding;
  ``EVALUATE`` (the default) reuses ``impl`` with NumPy, ``NEVER_FOLD`` opts out (random and
  stateful ops).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.ir.graph import TensorType


class ShapeError(ValueError):
    """Inputs of an op do not fit together (raised at graph-build time)."""


@dataclass(frozen=True)
class OpDef:
    name: str
    effectful: bool = False  # has an effect beyond its outputs: never pruned, folded or merged
    stateful: bool = False  # reads or writes the device's variable store
    doc: str = ""


class _Marker:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


NOT_DIFFERENTIABLE = _Marker("NOT_DIFFERENTIABLE")
EVALUATE = _Marker("EVALUATE")
NEVER_FOLD = _Marker("NEVER_FOLD")

OPS: dict[str, OpDef] = {}
IMPL_RULES: dict[str, Callable[..., Any]] = {}
SHAPE_RULES: dict[str, Callable[..., tuple[TensorType, ...]]] = {}
VJP_RULES: dict[str, Any] = {}
FOLD_RULES: dict[str, Any] = {}


def define_op(
    name: str,
    *,
    impl: Callable[..., Any],
    shape: Callable[..., tuple[TensorType, ...] | TensorType],
    vjp: Any,
    fold: Any = EVALUATE,
    effectful: bool = False,
    stateful: bool = False,
    doc: str = "",
) -> None:
    """Register an op and its rules; see the module docstring for each rule's signature."""
    if name in OPS:
        raise ValueError(f"op {name!r} is defined twice")

    def shape_rule(input_types: tuple[TensorType, ...], **attrs: Any) -> tuple[TensorType, ...]:
        result = shape(input_types, **attrs)
        return (result,) if isinstance(result, TensorType) else tuple(result)

    OPS[name] = OpDef(name, effectful=effectful, stateful=stateful, doc=doc)
    IMPL_RULES[name] = impl
    SHAPE_RULES[name] = shape_rule
    VJP_RULES[name] = vjp
    FOLD_RULES[name] = NEVER_FOLD if stateful else fold


def fold_with_numpy(op: str, arrays: list[np.ndarray], attrs: dict[str, Any]) -> tuple | None:
    """Evaluate ``op`` on constant NumPy arrays, or return ``None`` when the op never folds."""
    rule = FOLD_RULES[op]
    if rule is NEVER_FOLD:
        return None
    result = IMPL_RULES[op](np, *arrays, **attrs) if rule is EVALUATE else rule(arrays, **attrs)
    return result if isinstance(result, tuple) else (result,)


# --- small helpers shared by the op modules -------------------------------------------------


def same_dtype(op: str, *types: TensorType) -> str:
    dtypes = {t.dtype for t in types}
    if len(dtypes) != 1:
        listed = ", ".join(str(t) for t in types)
        raise ShapeError(f"{op}: inputs must share one dtype, got {listed}")
    return types[0].dtype


def is_float(dtype: str) -> bool:
    return dtype.startswith("float") or dtype == "bfloat16"


def require_float(op: str, t: TensorType) -> None:
    if not is_float(t.dtype):
        raise ShapeError(f"{op}: needs a floating-point input, got {t}")


def normalize_axes(op: str, axes: Any, ndim: int) -> tuple[int, ...]:
    """Turn ``None`` / an int / a sequence of possibly negative axes into sorted positive ones."""
    if axes is None:
        return tuple(range(ndim))
    if isinstance(axes, int):
        axes = (axes,)
    result = []
    for axis in axes:
        if not -ndim <= axis < ndim:
            raise ShapeError(f"{op}: axis {axis} is out of range for a rank-{ndim} input")
        result.append(axis % ndim)
    if len(set(result)) != len(result):
        raise ShapeError(f"{op}: repeated axis in {tuple(axes)}")
    return tuple(sorted(result))
