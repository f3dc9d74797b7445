"""Keras-like layers that emit IR.

A layer knows how to create its parameters (``build``: NumPy arrays, initialised in float64 and
cast, so float32 and float64 runs start from the same point) and how to add its computation to a
graph (``apply``: IR tensors in, IR tensor out). Parameters are named by layer path, e.g.
``dense_1/kernel``; that name is the variable name on every device and in checkpoints.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from workbench.ir import Tensor, ops

ACTIVATIONS = ("relu", "tanh", "sigmoid", "gelu", "linear")


class ModelError(ValueError):
    """A model definition does not fit its input (names the layer and the shapes)."""


@dataclass
class ApplyContext:
    """What a layer may need besides its input: training or inference, the dropout seed."""

    training: bool
    dropout_seed: Tensor | None = None


def glorot_uniform(rng: np.random.Generator, shape, fan_in: int, fan_out: int) -> np.ndarray:
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    return rng.uniform(-limit, limit, size=shape)


def activate(x: Tensor, activation: str | None) -> Tensor:
    if activation is None or activation == "linear":
        return x
    return {"relu": ops.relu, "tanh": ops.tanh, "sigmoid": ops.sigmoid, "gelu": ops.gelu}[
        activation
    ](x)


def _check_activation(activation: str | None) -> None:
    if activation is not None and activation not in ACTIVATIONS:
        raise ModelError(f"activation {activation!r} is not one of {', '.join(ACTIVATIONS)}")


_DEVICE_SCOPE = threading.local()


@contextlib.contextmanager
def device(name: str) -> Iterator[None]:
    """Pin the layers created inside to a device, like ``tf.device``: ``"/task:1"`` matches
    ``/job:worker/task:1/device:CPU:0``. Honoured by the model-parallel strategy's placer.

    Examples
    --------
    >>> with device("/task:1"):
    ...     head = Dense(10)
    >>> head.device
    '/task:1'
    """
    stack = _DEVICE_SCOPE.__dict__.setdefault("stack", [])
    stack.append(name)
    try:
        yield
    finally:
        stack.pop()


class Layer:
    kind: ClassVar[str] = "layer"
    name: str = ""
    device: str | None = None

    def __new__(cls, *args, **kwargs):
        layer = super().__new__(cls)
        stack = getattr(_DEVICE_SCOPE, "stack", None)
        layer.device = stack[-1] if stack else None
        return layer

    def build(self, input_shape: tuple[int, ...], rng: np.random.Generator):
        """Return (parameters by short name, output shape)."""
        return {}, input_shape

    def apply(self, x: Tensor, params: dict[str, Tensor], context: ApplyContext) -> Tensor:
        raise NotImplementedError


class Dense(Layer):
    kind = "dense"

    def __init__(self, units: int, activation: str | None = None) -> None:
        if units < 1:
            raise ModelError(f"Dense units must be >= 1, got {units}")
        _check_activation(activation)
        self.units, self.activation = units, activation

    def build(self, input_shape, rng):
        # Like Keras, Dense maps the last axis, so (tokens, width) works; image-shaped input is
        # almost always a forgotten Flatten, so it is refused.
        if len(input_shape) not in (1, 2):
            raise ModelError(
                f"{self.name}: Dense needs a flat input, got shape {input_shape}; add Flatten()"
            )
        width = input_shape[-1]
        kernel = glorot_uniform(rng, (width, self.units), width, self.units)
        return {"kernel": kernel, "bias": np.zeros(self.units)}, (*input_shape[:-1], self.units)

    def apply(self, x, params, context):
        return activate(x @ params["kernel"] + params["bias"], self.activation)


class Conv2D(Layer):
    kind = "conv2d"

    def __init__(
        self,
        filters: int,
        kernel_size: int,
        stride: int = 1,
        padding: str = "same",
        activation: str | None = None,
    ) -> None:
        if filters < 1 or kernel_size < 1 or stride < 1:
            raise ModelError("Conv2D filters, kernel_size and stride must be >= 1")
        if padding not in ("same", "valid"):
            raise ModelError(f"Conv2D padding must be 'same' or 'valid', got {padding!r}")
        if padding == "same" and kernel_size % 2 == 0:
            raise ModelError("Conv2D padding='same' needs an odd kernel_size")
        _check_activation(activation)
        self.filters, self.kernel_size, self.stride = filters, kernel_size, stride
        self.padding, self.activation = padding, activation

    @property
    def pixels_padded(self) -> int:
        return self.kernel_size // 2 if self.padding == "same" else 0

    def build(self, input_shape, rng):
        if len(input_shape) != 3:
            raise ModelError(
                f"{self.name}: Conv2D needs (channels, height, width), got {input_shape}"
            )
        channels, height, width = input_shape
        k, pad = self.kernel_size, self.pixels_padded
        out_h = (height + 2 * pad - k) // self.stride + 1
        out_w = (width + 2 * pad - k) // self.stride + 1
        if out_h < 1 or out_w < 1:
            raise ModelError(f"{self.name}: a {k}x{k} kernel does not fit input {input_shape}")
        kernel = glorot_uniform(
            rng, (self.filters, channels, k, k), channels * k * k, self.filters * k * k
        )
        return {"kernel": kernel, "bias": np.zeros(self.filters)}, (self.filters, out_h, out_w)

    def apply(self, x, params, context):
        y = ops.conv2d(x, params["kernel"], stride=self.stride, padding=self.pixels_padded)
        return activate(y + ops.reshape(params["bias"], (1, self.filters, 1, 1)), self.activation)


class _Pool2D(Layer):
    def __init__(self, size: int = 2, stride: int | None = None) -> None:
        if size < 1 or (stride is not None and stride < 1):
            raise ModelError("pooling size and stride must be >= 1")
        self.size, self.stride = size, stride or size

    def build(self, input_shape, rng):
        if len(input_shape) != 3 or min(input_shape[1:]) < self.size:
            raise ModelError(
                f"{self.name}: a {self.size}x{self.size} pool needs (channels, height, width) "
                f"at least that large, got {input_shape}"
            )
        c, h, w = input_shape
        return {}, (c, (h - self.size) // self.stride + 1, (w - self.size) // self.stride + 1)


class MaxPool2D(_Pool2D):
    kind = "max_pool2d"

    def apply(self, x, params, context):
        return ops.max_pool2d(x, self.size, self.stride)


class AvgPool2D(_Pool2D):
    kind = "avg_pool2d"

    def apply(self, x, params, context):
        return ops.avg_pool2d(x, self.size, self.stride)


class Flatten(Layer):
    kind = "flatten"

    def build(self, input_shape, rng):
        return {}, (int(np.prod(input_shape)),)

    def apply(self, x, params, context):
        return ops.reshape(x, (x.shape[0], -1))


class Activation(Layer):
    kind = "activation"

    def __init__(self, activation: str) -> None:
        _check_activation(activation)
        self.activation = activation

    def apply(self, x, params, context):
        return activate(x, self.activation)


class LayerNorm(Layer):
    kind = "layer_norm"

    def __init__(self, epsilon: float = 1e-5) -> None:
        self.epsilon = epsilon

    def build(self, input_shape, rng):
        width = input_shape[-1]
        return {"gamma": np.ones(width), "beta": np.zeros(width)}, input_shape

    def apply(self, x, params, context):
        return ops.layer_norm(x, params["gamma"], params["beta"], self.epsilon)


class Dropout(Layer):
    kind = "dropout"

    def __init__(self, rate: float) -> None:
        if not 0.0 <= rate < 1.0:
            raise ModelError(f"Dropout rate must be in [0, 1), got {rate}")
        self.rate = rate

    def apply(self, x, params, context):
        if not context.training or self.rate == 0.0:
            return x
        # Each dropout layer derives its own stream from the step's seed.
        index = int(self.name.rsplit("_", 1)[-1]) if "_" in self.name else 0
        seed = context.dropout_seed * 1009 + index if index else context.dropout_seed
        return ops.dropout(x, seed, self.rate)


class Embedding(Layer):
    kind = "embedding"
    takes_integer_input = True

    def __init__(self, vocabulary: int, width: int) -> None:
        if vocabulary < 1 or width < 1:
            raise ModelError("Embedding vocabulary and width must be >= 1")
        self.vocabulary, self.width = vocabulary, width

    def build(self, input_shape, rng):
        table = rng.uniform(-0.05, 0.05, size=(self.vocabulary, self.width))  # Keras default
        return {"embeddings": table}, (*input_shape, self.width)

    def apply(self, x, params, context):
        return ops.embedding(x, params["embeddings"])
