"""Ops with no inputs: fed placeholders, constants, and reads of device-resident variables."""

from __future__ import annotations

from workbench.ir.graph import DTYPES, TensorType
from workbench.ir.rules import NEVER_FOLD, ShapeError, define_op


def _leaf_vjp(inputs, outputs, cotangents, **attrs):
    return []


def _declared_type(op: str, shape: tuple[int, ...], dtype: str) -> TensorType:
    if dtype not in DTYPES:
        raise ShapeError(f"{op}: dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    if any(not isinstance(size, int) or size < 0 for size in shape):
        raise ShapeError(f"{op}: shape {shape} must hold non-negative integers")
    return TensorType(tuple(shape), dtype)


def _placeholder_impl(xp, *, shape, dtype):
    raise RuntimeError("placeholders are fed by the interpreter, never computed")


define_op(
    "placeholder",
    impl=_placeholder_impl,
    shape=lambda types, *, shape, dtype: _declared_type("placeholder", shape, dtype),
    vjp=_leaf_vjp,
    fold=NEVER_FOLD,
    doc="A value fed at run time.",
)

define_op(
    "constant",
    impl=lambda xp, *, value: xp.asarray(value),
    shape=lambda types, *, value: TensorType(tuple(value.shape), str(value.dtype)),
    vjp=_leaf_vjp,
    doc="A literal array held in the graph.",
)


def _variable_impl(xp, *, state, var, shape, dtype):
    return state[var]


define_op(
    "variable",
    impl=_variable_impl,
    shape=lambda types, *, var, shape, dtype: _declared_type("variable", shape, dtype),
    vjp=_leaf_vjp,
    stateful=True,
    doc="Reads the device-resident variable named by ``var``.",
)
