"""Elementwise ops: broadcasting arithmetic, activations, comparisons and casts."""

from __future__ import annotations

import math
from collections.abc import Callable

from workbench.ir.builder import Tensor
from workbench.ir.graph import DTYPES, TensorType
from workbench.ir.ops._common import broadcast_types, emit, lift, sum_to_shape
from workbench.ir.rules import (
    NOT_DIFFERENTIABLE,
    ShapeError,
    define_op,
    is_float,
    require_float,
    same_dtype,
)

# Each table row is one op: its NumPy implementation and its vector-Jacobian product, written
# as the gradients of its inputs (``g`` the output's cotangent, ``y`` the output). The builder
# functions below the tables emit the op by name.


def _binary(op: str) -> Callable[[Tensor, Tensor | float], Tensor]:
    def build(a: Tensor, b: Tensor | float) -> Tensor:
        return emit(op, a, lift(a, b))

    build.__name__ = build.__qualname__ = op
    return build


def _unary(op: str, doc: str = "") -> Callable[[Tensor], Tensor]:
    def build(x: Tensor) -> Tensor:
        return emit(op, x)

    build.__name__ = build.__qualname__ = op
    build.__doc__ = doc or None
    return build


# --- binary arithmetic with NumPy broadcasting -------------------------------------------


def _binary_shape(op: str):
    def rule(types, **attrs):
        a, b = types
        return TensorType(broadcast_types(op, a, b), same_dtype(op, a, b))

    return rule


def _unbroadcast(inputs, gradients):
    return [None if g is None else sum_to_shape(g, x.shape) for x, g in zip(inputs, gradients)]


def _maximum_gradients(a, b, y, g):
    # Ties send the gradient to the first argument, as the subgradient convention of TF does.
    a_wins = cast(greater_equal(a, b), g.dtype)
    return [g * a_wins, g * (1.0 - a_wins)]


ARITHMETIC = {  # op: (impl(xp, a, b), gradients(a, b, y, g) of a and b before unbroadcasting)
    "add": (lambda xp, a, b: a + b, lambda a, b, y, g: [g, g]),
    "sub": (lambda xp, a, b: a - b, lambda a, b, y, g: [g, -g]),
    "mul": (lambda xp, a, b: a * b, lambda a, b, y, g: [g * b, g * a]),
    "div": (lambda xp, a, b: a / b, lambda a, b, y, g: [g / b, -g * y / b]),
    "maximum": (lambda xp, a, b: xp.maximum(a, b), _maximum_gradients),
}


def _broadcasting_vjp(gradients):
    return lambda inputs, outputs, cts: _unbroadcast(inputs, gradients(*inputs, outputs[0], cts[0]))


for _op, (_impl, _gradients) in ARITHMETIC.items():
    define_op(_op, impl=_impl, shape=_binary_shape(_op), vjp=_broadcasting_vjp(_gradients))

add, sub, mul, div = _binary("add"), _binary("sub"), _binary("mul"), _binary("div")
maximum = _binary("maximum")

# --- comparisons (boolean results, no gradient) -------------------------------------------


def _comparison_shape(op: str):
    def rule(types, **attrs):
        a, b = types
        same_dtype(op, a, b)
        return TensorType(broadcast_types(op, a, b), "bool")

    return rule


COMPARISONS = {  # op: impl(xp, a, b)
    "greater": lambda xp, a, b: a > b,
    "greater_equal": lambda xp, a, b: a >= b,
    "equal": lambda xp, a, b: a == b,
}
for _op, _compare in COMPARISONS.items():
    define_op(_op, impl=_compare, shape=_comparison_shape(_op), vjp=NOT_DIFFERENTIABLE)

greater, greater_equal, equal = _binary("greater"), _binary("greater_equal"), _binary("equal")

# --- unary math ----------------------------------------------------------------------------


def _float_unary_shape(op: str):
    def rule(types, **attrs):
        require_float(op, types[0])
        return types[0]

    return rule


_GELU_C = math.sqrt(2.0 / math.pi)
_GELU_A = 0.044715


def _number(x, value: float):
    """``value`` as a scalar of ``x``'s dtype: bfloat16 arrays (ml_dtypes) promote a Python
    float to float32, where NumPy's own types keep theirs."""
    return x.dtype.type(value)


def _gelu_impl(xp, x):
    half, c, a = _number(x, 0.5), _number(x, _GELU_C), _number(x, _GELU_A)
    return half * x * (1 + xp.tanh(c * (x + a * x * x * x)))


def _gelu_gradient(x, y, g):
    t = tanh((x + x * x * x * _GELU_A) * _GELU_C)
    slope = (1.0 + t) * 0.5 + x * (1.0 - t * t) * (1.0 + x * x * (3 * _GELU_A)) * (0.5 * _GELU_C)
    return g * slope


UNARY = {  # op: (impl(xp, x), gradient(x, y, g) of x)
    "neg": (lambda xp, x: -x, lambda x, y, g: -g),
    "exp": (lambda xp, x: xp.exp(x), lambda x, y, g: g * y),
    "log": (lambda xp, x: xp.log(x), lambda x, y, g: g / x),
    "sqrt": (lambda xp, x: xp.sqrt(x), lambda x, y, g: g / (y * 2.0)),
    "tanh": (lambda xp, x: xp.tanh(x), lambda x, y, g: g * (1.0 - y * y)),
    # sigmoid through tanh never overflows, unlike 1 / (1 + exp(-x)) for large negative x.
    "sigmoid": (
        lambda xp, x: (xp.tanh(x * _number(x, 0.5)) + 1) * _number(x, 0.5),
        lambda x, y, g: g * y * (1.0 - y),
    ),
    "relu": (lambda xp, x: xp.maximum(x, _number(x, 0.0)), lambda x, y, g: relu_grad(x, g)),
    "gelu": (_gelu_impl, _gelu_gradient),
}


def _unary_vjp(gradient):
    return lambda inputs, outputs, cts: [gradient(inputs[0], outputs[0], cts[0])]


for _op, (_unary_impl, _gradient) in UNARY.items():
    define_op(_op, impl=_unary_impl, shape=_float_unary_shape(_op), vjp=_unary_vjp(_gradient))

neg, exp, log, sqrt = _unary("neg"), _unary("exp"), _unary("log"), _unary("sqrt")
tanh, sigmoid, relu = _unary("tanh"), _unary("sigmoid"), _unary("relu")
gelu = _unary("gelu", "GELU, tanh approximation (Hendrycks & Gimpel), as used by BERT and GPT-2.")


def relu_grad(x: Tensor, gradient: Tensor) -> Tensor:
    """``gradient`` where ``x > 0``, else 0: the backward of relu as one fused op."""
    return emit("relu_grad", x, gradient)


def _relu_grad_shape(types, **attrs):
    x, g = types
    if x != g:
        raise ShapeError(f"relu_grad: x {x} and gradient {g} must have one type")
    return x


define_op(
    "relu_grad",
    impl=lambda xp, x, g: g * (x > 0),
    shape=_relu_grad_shape,
    # relu_grad is linear in its gradient and piecewise constant in x.
    vjp=lambda inputs, outputs, cts: [None, relu_grad(inputs[0], cts[0])],
)

# --- casts ------------------------------------------------------------------------------------


def cast(x: Tensor, dtype: str) -> Tensor:
    return emit("cast", x, dtype=dtype)


def _cast_shape(types, *, dtype):
    if dtype not in DTYPES:
        raise ShapeError(f"cast: dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    return TensorType(types[0].shape, dtype)


def _cast_vjp(inputs, outputs, cts, *, dtype):
    if not (is_float(inputs[0].dtype) and is_float(dtype)):
        return [None]
    return [cast(cts[0], inputs[0].dtype)]


define_op(
    "cast",
    impl=lambda xp, x, *, dtype: x.astype(dtype, copy=False),
    shape=_cast_shape,
    vjp=_cast_vjp,
)
