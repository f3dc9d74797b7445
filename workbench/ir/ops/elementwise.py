"""Elementwise ops: broadcasting arithmetic, activations, comparisons and casts."""

from __future__ import annotations

import math

from workbench.ir.builder import Tensor
from workbench.ir.graph import DTYPES, TensorType
from workbench.ir.ops._common import broadcast_types, emit, lift, sum_to_shape
from workbench.ir.rules import NOT_DIFFERENTIABLE, ShapeError, define_op, require_float, same_dtype

# --- binary arithmetic with NumPy broadcasting -------------------------------------------


def _binary_shape(op: str):
    def rule(types, **attrs):
        a, b = types
        return TensorType(broadcast_types(op, a, b), same_dtype(op, a, b))

    return rule


def _unbroadcast(inputs, gradients):
    return [None if g is None else sum_to_shape(g, x.shape) for x, g in zip(inputs, gradients)]


def add(a: Tensor, b: Tensor | float) -> Tensor:
    return emit("add", a, lift(a, b))


def sub(a: Tensor, b: Tensor | float) -> Tensor:
    return emit("sub", a, lift(a, b))


def mul(a: Tensor, b: Tensor | float) -> Tensor:
    return emit("mul", a, lift(a, b))


def div(a: Tensor, b: Tensor | float) -> Tensor:
    return emit("div", a, lift(a, b))


def maximum(a: Tensor, b: Tensor | float) -> Tensor:
    return emit("maximum", a, lift(a, b))


define_op(
    "add",
    impl=lambda xp, a, b: a + b,
    shape=_binary_shape("add"),
    vjp=lambda inputs, outputs, cts: _unbroadcast(inputs, [cts[0], cts[0]]),
)
define_op(
    "sub",
    impl=lambda xp, a, b: a - b,
    shape=_binary_shape("sub"),
    vjp=lambda inputs, outputs, cts: _unbroadcast(inputs, [cts[0], -cts[0]]),
)
define_op(
    "mul",
    impl=lambda xp, a, b: a * b,
    shape=_binary_shape("mul"),
    vjp=lambda inputs, outputs, cts: _unbroadcast(inputs, [cts[0] * inputs[1], cts[0] * inputs[0]]),
)
define_op(
    "div",
    impl=lambda xp, a, b: a / b,
    shape=_binary_shape("div"),
    vjp=lambda inputs, outputs, cts: _unbroadcast(
        inputs, [cts[0] / inputs[1], -cts[0] * outputs[0] / inputs[1]]
    ),
)


def _maximum_vjp(inputs, outputs, cts):
    a, b = inputs
    # Ties send the gradient to the first argument, as the subgradient convention of TF does.
    a_wins = cast(greater_equal(a, b), cts[0].dtype)
    return _unbroadcast(inputs, [cts[0] * a_wins, cts[0] * (1.0 - a_wins)])


define_op(
    "maximum",
    impl=lambda xp, a, b: xp.maximum(a, b),
    shape=_binary_shape("maximum"),
    vjp=_maximum_vjp,
)

# --- comparisons (boolean results, no gradient) -------------------------------------------


def _comparison_shape(op: str):
    def rule(types, **attrs):
        a, b = types
        same_dtype(op, a, b)
        return TensorType(broadcast_types(op, a, b), "bool")

    return rule


def greater(a: Tensor, b: Tensor | float) -> Tensor:
    return emit("greater", a, lift(a, b))


def greater_equal(a: Tensor, b: Tensor | float) -> Tensor:
    return emit("greater_equal", a, lift(a, b))


def equal(a: Tensor, b: Tensor | float) -> Tensor:
    return emit("equal", a, lift(a, b))


define_op(
    "greater",
    impl=lambda xp, a, b: a > b,
    shape=_comparison_shape("greater"),
    vjp=NOT_DIFFERENTIABLE,
)
define_op(
    "greater_equal",
    impl=lambda xp, a, b: a >= b,
    shape=_comparison_shape("greater_equal"),
    vjp=NOT_DIFFERENTIABLE,
)
define_op(
    "equal", impl=lambda xp, a, b: a == b, shape=_comparison_shape("equal"), vjp=NOT_DIFFERENTIABLE
)

# --- unary math ----------------------------------------------------------------------------


def _float_unary_shape(op: str):
    def rule(types, **attrs):
        require_float(op, types[0])
        return types[0]

    return rule


def neg(x: Tensor) -> Tensor:
    return emit("neg", x)


def exp(x: Tensor) -> Tensor:
    return emit("exp", x)


def log(x: Tensor) -> Tensor:
    return emit("log", x)


def sqrt(x: Tensor) -> Tensor:
    return emit("sqrt", x)


def tanh(x: Tensor) -> Tensor:
    return emit("tanh", x)


def sigmoid(x: Tensor) -> Tensor:
    return emit("sigmoid", x)


def relu(x: Tensor) -> Tensor:
    return emit("relu", x)


def relu_grad(x: Tensor, gradient: Tensor) -> Tensor:
    """``gradient`` where ``x > 0``, else 0: the backward of relu as one fused op."""
    return emit("relu_grad", x, gradient)


def gelu(x: Tensor) -> Tensor:
    """GELU, tanh approximation (Hendrycks & Gimpel), as used by BERT and GPT-2."""
    return emit("gelu", x)


define_op(
    "neg",
    impl=lambda xp, x: -x,
    shape=_float_unary_shape("neg"),
    vjp=lambda inputs, outputs, cts: [-cts[0]],
)
define_op(
    "exp",
    impl=lambda xp, x: xp.exp(x),
    shape=_float_unary_shape("exp"),
    vjp=lambda inputs, outputs, cts: [cts[0] * outputs[0]],
)
define_op(
    "log",
    impl=lambda xp, x: xp.log(x),
    shape=_float_unary_shape("log"),
    vjp=lambda inputs, outputs, cts: [cts[0] / inputs[0]],
)
define_op(
    "sqrt",
    impl=lambda xp, x: xp.sqrt(x),
    shape=_float_unary_shape("sqrt"),
    vjp=lambda inputs, outputs, cts: [cts[0] / (outputs[0] * 2.0)],
)
define_op(
    "tanh",
    impl=lambda xp, x: xp.tanh(x),
    shape=_float_unary_shape("tanh"),
    vjp=lambda inputs, outputs, cts: [cts[0] * (1.0 - outputs[0] * outputs[0])],
)
# sigmoid through tanh never overflows, unlike 1 / (1 + exp(-x)) for large negative x.
define_op(
    "sigmoid",
    impl=lambda xp, x: (xp.tanh(x * 0.5) + 1) * 0.5,
    shape=_float_unary_shape("sigmoid"),
    vjp=lambda inputs, outputs, cts: [cts[0] * outputs[0] * (1.0 - outputs[0])],
)
define_op(
    "relu",
    impl=lambda xp, x: xp.maximum(x, 0),
    shape=_float_unary_shape("relu"),
    vjp=lambda inputs, outputs, cts: [relu_grad(inputs[0], cts[0])],
)


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

_GELU_C = math.sqrt(2.0 / math.pi)
_GELU_A = 0.044715


def _gelu_impl(xp, x):
    return 0.5 * x * (1 + xp.tanh(_GELU_C * (x + _GELU_A * x * x * x)))


def _gelu_vjp(inputs, outputs, cts):
    x = inputs[0]
    t = tanh((x + x * x * x * _GELU_A) * _GELU_C)
    slope = (1.0 + t) * 0.5 + x * (1.0 - t * t) * (1.0 + x * x * (3 * _GELU_A)) * (0.5 * _GELU_C)
    return [cts[0] * slope]


define_op("gelu", impl=_gelu_impl, shape=_float_unary_shape("gelu"), vjp=_gelu_vjp)

# --- casts ------------------------------------------------------------------------------------


def cast(x: Tensor, dtype: str) -> Tensor:
    return emit("cast", x, dtype=dtype)


def _cast_shape(types, *, dtype):
    if dtype not in DTYPES:
        raise ShapeError(f"cast: dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    return TensorType(types[0].shape, dtype)


def _cast_vjp(inputs, outputs, cts, *, dtype):
    if not (inputs[0].dtype.startswith("float") and dtype.startswith("float")):
        return [None]
    return [cast(cts[0], inputs[0].dtype)]


define_op(
    "cast",
    impl=lambda xp, x, *, dtype: x.astype(dtype, copy=False),
    shape=_cast_shape,
    vjp=_cast_vjp,
)
