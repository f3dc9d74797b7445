"""Optimizers: SGD, momentum and Adam, with their state as device-resident slot variables.

An optimizer does two things: it creates slot arrays next to each parameter (``slots``), and it
emits one in-place update op per parameter into the training graph (``emit_update``). The
update ops wait, through control inputs, on every node that computes the loss or a gradient, so
no reader ever sees a half-updated variable, whatever order a partition runs them in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from workbench.ir import Tensor, ops

OPTIMIZER_NAMES = ("sgd", "momentum", "adam")


class OptimizerError(ValueError):
    pass


@dataclass(frozen=True)
class Optimizer:
    name: str
    default_learning_rate: float

    def slots(self, variable: str, value: np.ndarray) -> dict[str, np.ndarray]:
        return {}

    def emit_update(
        self,
        variable: Tensor,
        gradient: Tensor,
        learning_rate: Tensor,
        name: str,
        after: Sequence[str],
    ):
        raise NotImplementedError


@dataclass(frozen=True)
class SGD(Optimizer):
    name: str = "sgd"
    default_learning_rate: float = 0.1

    def emit_update(self, variable, gradient, learning_rate, name, after):
        return variable.builder.emit(
            "apply_sgd", [variable, gradient, learning_rate], var=name, control_inputs=after
        )


@dataclass(frozen=True)
class Momentum(Optimizer):
    """Heavy-ball momentum as TF's ApplyMomentum: v = mu*v + g; w -= lr*v."""

    name: str = "momentum"
    default_learning_rate: float = 0.1
    momentum: float = 0.9

    def slots(self, variable, value):
        return {f"{variable}/momentum": np.zeros_like(value)}

    def emit_update(self, variable, gradient, learning_rate, name, after):
        return variable.builder.emit(
            "apply_momentum",
            [variable, gradient, learning_rate],
            var=name,
            momentum=self.momentum,
            control_inputs=after,
        )


@dataclass(frozen=True)
class Adam(Optimizer):
    name: str = "adam"
    default_learning_rate: float = 0.001
    beta1: float = 0.9
    beta2: float = 0.999
    epsilon: float = 1e-7  # Keras's default

    def slots(self, variable, value):
        return {
            f"{variable}/adam_m": np.zeros_like(value),
            f"{variable}/adam_v": np.zeros_like(value),
            f"{variable}/adam_t": np.zeros((), dtype=np.int64),
        }

    def emit_update(self, variable, gradient, learning_rate, name, after):
        return variable.builder.emit(
            "apply_adam",
            [variable, gradient, learning_rate],
            var=name,
            beta1=self.beta1,
            beta2=self.beta2,
            epsilon=self.epsilon,
            control_inputs=after,
        )


def make_optimizer(name: str) -> Optimizer:
    """The optimizer called ``name`` (one of ``sgd``, ``momentum``, ``adam``)."""
    table = {"sgd": SGD, "momentum": Momentum, "adam": Adam}
    if name not in table:
        raise OptimizerError(f"optimizer {name!r} is not one of {', '.join(OPTIMIZER_NAMES)}")
    return table[name]()


def emit_updates(
    optimizer: Optimizer,
    params: dict[str, Tensor],
    grads: Sequence[Tensor],
    learning_rate: Tensor,
    after: Sequence[str],
) -> list:
    return [
        optimizer.emit_update(params[name], grad, learning_rate, name, after)
        for name, grad in zip(params, grads)
    ]


def init_slots(optimizer: Optimizer, params: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    state: dict[str, np.ndarray] = {}
    for name, value in params.items():
        state.update(optimizer.slots(name, value))
    return state


_ = ops  # the update ops are registered by importing workbench.ir.ops
