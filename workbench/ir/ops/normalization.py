"""Layer normalisation over the last axis (Ba, Kiros & Hinton 2016).

The forward pass is one fused op; its vjp is written with primitive ops, so no separate
gradient kernel is needed and higher derivatives follow from the primitives' rules.
"""

from __future__ import annotations

from workbench.ir.builder import Tensor
from workbench.ir.graph import TensorType
from workbench.ir.ops._common import emit, in_float32, sum_to_shape
from workbench.ir.ops.elementwise import sqrt
from workbench.ir.ops.reductions import reduce_mean
from workbench.ir.rules import ShapeError, define_op, require_float, same_dtype


def layer_norm(x: Tensor, gamma: Tensor, beta: Tensor, epsilon: float = 1e-5) -> Tensor:
    return emit("layer_norm", x, gamma, beta, epsilon=epsilon)


def _layer_norm_impl(xp, x, gamma, beta, *, epsilon):
    # 16-bit inputs are normalised in float32: the variance of float16 values underflows.
    return in_float32(lambda *arrays: _normalized(xp, *arrays, epsilon), x, gamma, beta)


def _normalized(xp, x, gamma, beta, epsilon):
    mean = xp.mean(x, axis=-1, keepdims=True)
    centered = x - mean
    variance = xp.mean(centered * centered, axis=-1, keepdims=True)
    return centered / xp.sqrt(variance + epsilon) * gamma + beta


def _layer_norm_shape(types, *, epsilon):
    x, gamma, beta = types
    require_float("layer_norm", x)
    same_dtype("layer_norm", x, gamma, beta)
    if not x.shape or gamma.shape != x.shape[-1:] or beta.shape != x.shape[-1:]:
        raise ShapeError(
            f"layer_norm: gamma and beta must have shape ({x.shape[-1:]}) of the last axis of {x}"
        )
    return TensorType(x.shape, x.dtype)


def _layer_norm_vjp(inputs, outputs, cts, *, epsilon):

    x, gamma, _ = inputs
    g = cts[0]
    mean = reduce_mean(x, -1, keepdims=True)
    centered = x - mean
    inv_std = 1.0 / sqrt(reduce_mean(centered * centered, -1, keepdims=True) + epsilon)
    normalized = centered * inv_std
    scaled = g * gamma
    grad_x = inv_std * (
        scaled
        - reduce_mean(scaled, -1, keepdims=True)
        - normalized * reduce_mean(scaled * normalized, -1, keepdims=True)
    )
    return [grad_x, sum_to_shape(g * normalized, gamma.shape), sum_to_shape(g, gamma.shape)]


define_op("layer_norm", impl=_layer_norm_impl, shape=_layer_norm_shape, vjp=_layer_norm_vjp)
