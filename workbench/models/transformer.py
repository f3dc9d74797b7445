"""A small pre-norm Transformer encoder block (Vaswani et al. 2017; pre-norm as in GPT-2) and
the two layers a sequence classifier needs around it.

Everything is written with the IR's primitive ops (batched matmul, softmax, layer norm, gelu),
so the block is differentiated, placed and partitioned like any other layer.
"""

from __future__ import annotations

import math

import numpy as np

from workbench.ir import ops
from workbench.models.layers import Layer, ModelError, glorot_uniform


class Reshape(Layer):
    """Reshape each example (the batch axis is kept)."""

    kind = "reshape"

    def __init__(self, shape) -> None:
        self.shape = tuple(int(s) for s in shape)

    def build(self, input_shape, rng):
        if int(np.prod(input_shape)) != int(np.prod(self.shape)):
            raise ModelError(f"{self.name}: cannot reshape {input_shape} into {self.shape}")
        return {}, self.shape

    def apply(self, x, params, context):
        return ops.reshape(x, (x.shape[0], *self.shape))


class TokenMean(Layer):
    """Average over the token axis: (tokens, width) -> (width,)."""

    kind = "token_mean"

    def build(self, input_shape, rng):
        if len(input_shape) != 2:
            raise ModelError(f"{self.name}: needs (tokens, width), got {input_shape}")
        return {}, input_shape[1:]

    def apply(self, x, params, context):
        return ops.reduce_mean(x, axes=1)


class TransformerBlock(Layer):
    """x + attention(layer_norm(x)), then + mlp(layer_norm(.)); input (tokens, width)."""

    kind = "transformer"

    def __init__(self, heads: int = 2, mlp_ratio: int = 4) -> None:
        if heads < 1 or mlp_ratio < 1:
            raise ModelError("TransformerBlock heads and mlp_ratio must be >= 1")
        self.heads, self.mlp_ratio = heads, mlp_ratio

    def build(self, input_shape, rng):
        if len(input_shape) != 2:
            raise ModelError(f"{self.name}: needs (tokens, width), got {input_shape}")
        _, width = input_shape
        if width % self.heads:
            raise ModelError(f"{self.name}: width {width} is not divisible by {self.heads} heads")
        hidden = width * self.mlp_ratio
        params = {
            "norm1/gamma": np.ones(width),
            "norm1/beta": np.zeros(width),
            "norm2/gamma": np.ones(width),
            "norm2/beta": np.zeros(width),
            "mlp/bias1": np.zeros(hidden),
            "mlp/bias2": np.zeros(width),
        }
        for name in ("query", "key", "value", "output"):
            params[f"attention/{name}"] = glorot_uniform(rng, (width, width), width, width)
        params["mlp/kernel1"] = glorot_uniform(rng, (width, hidden), width, hidden)
        params["mlp/kernel2"] = glorot_uniform(rng, (hidden, width), hidden, width)
        return params, input_shape

    def _split_heads(self, x):
        batch, tokens, width = x.shape
        x = ops.reshape(x, (batch, tokens, self.heads, width // self.heads))
        return ops.transpose(x, (0, 2, 1, 3))  # batch, heads, tokens, head width

    def apply(self, x, params, context):
        batch, tokens, width = x.shape
        h = ops.layer_norm(x, params["norm1/gamma"], params["norm1/beta"])
        query = self._split_heads(h @ params["attention/query"])
        key = self._split_heads(h @ params["attention/key"])
        value = self._split_heads(h @ params["attention/value"])
        scores = ops.matmul(query, ops.transpose(key, (0, 1, 3, 2)))
        weights = ops.softmax(scores * (1.0 / math.sqrt(width // self.heads)))
        mixed = ops.transpose(ops.matmul(weights, value), (0, 2, 1, 3))
        x = x + ops.reshape(mixed, (batch, tokens, width)) @ params["attention/output"]
        h = ops.layer_norm(x, params["norm2/gamma"], params["norm2/beta"])
        h = ops.gelu(h @ params["mlp/kernel1"] + params["mlp/bias1"])
        return x + h @ params["mlp/kernel2"] + params["mlp/bias2"]


class PositionEmbedding(Layer):
    """Adds a learned vector per token position (the transformer otherwise ignores order)."""

    kind = "position_embedding"

    def build(self, input_shape, rng):
        if len(input_shape) != 2:
            raise ModelError(f"{self.name}: needs (tokens, width), got {input_shape}")
        return {"positions": rng.normal(0.0, 0.02, size=input_shape)}, input_shape

    def apply(self, x, params, context):
        return x + params["positions"]
