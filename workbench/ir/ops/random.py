"""Dropout with an explicit seed tensor, so every run and every device draws the same mask.

The mask is drawn with NumPy's Philox generator keyed by the seed on the host and then moved to
the device: CPU and GPU runs therefore drop exactly the same units.
"""

from __future__ import annotations

import numpy as np

from workbench.ir.builder import Tensor
from workbench.ir.ops._common import emit
from workbench.ir.rules import ShapeError, define_op, require_float


def dropout(x: Tensor, seed: Tensor, rate: float) -> Tensor:
    """Zero each element with probability ``rate``, scale the rest by 1/(1-rate)."""
    return emit("dropout", x, seed, rate=float(rate))


def keep_mask(seed: int, shape: tuple[int, ...], rate: float) -> np.ndarray:
    generator = np.random.Generator(np.random.Philox(key=int(seed)))
    return generator.random(shape) >= rate


def _dropout_impl(xp, x, seed, *, rate):
    if rate == 0.0:
        return x
    mask = xp.asarray(keep_mask(int(seed), x.shape, rate))
    return x * mask * x.dtype.type(1.0 / (1.0 - rate))


def _dropout_shape(types, *, rate):
    x, seed = types
    require_float("dropout", x)
    if seed.shape != () or not seed.dtype.startswith("int"):
        raise ShapeError(f"dropout: seed must be an integer scalar, got {seed}")
    if not 0.0 <= rate < 1.0:
        raise ShapeError(f"dropout: rate must be in [0, 1), got {rate}")
    return x


define_op(
    "dropout",
    impl=_dropout_impl,
    shape=_dropout_shape,
    # For a fixed seed dropout is linear in x: its vjp is dropout with the same mask.
    vjp=lambda inputs, outputs, cts, *, rate: [dropout(cts[0], inputs[1], rate), None],
)
