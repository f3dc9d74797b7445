"""Optimizers: SGD, momentum and Adam, with their state as device-resident slot variables.

An optimizer does two things: it creates slot arrays next to each parameter (``slots``), and it
emits one in-place update op per parameter into the training graph (``emit_update``). The
update ops wait, through control inputs, on every node that computes the loss or a gradient, so
no reader ever sees a half-updated variable, whatever order a partition runs them in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from workbench.ir import Tensor, ops
from workbench.optim.master_weights import emit_refresh

OPTIMIZER_NAMES = ("sgd", "momentum", "adam")


class OptimizerError(ValueError):
    pass


@dataclass(frozen=True)
class Optimizer:
    """An optimizer is its in-place update op (``update_op``, an ``apply_*`` op of
    :mod:`workbench.ir.ops.state`), that op's hyperparameters (``hyperparameters``) and the
    slots it keeps per variable (``slots``)."""

    name: str
    default_learning_rate: float
    update_op: ClassVar[str]

    def slots(self, variable: str, value: np.ndarray) -> dict[str, np.ndarray]:
        return {}

    def hyperparameters(self) -> dict[str, float]:
        """The update op's attributes besides the variable's name."""
        return {}

    def emit_update(
        self,
        variable: Tensor,
        gradient: Tensor,
        learning_rate: Tensor,
        name: str,
        after: Sequence[str],
    ) -> Any:
        """The update of ``variable`` (called ``name``) by ``gradient``, after the nodes
        ``after``."""
        attributes: dict[str, Any] = {"var": name, **self.hyperparameters()}
        inputs = [variable, gradient, learning_rate]
        return variable.builder.emit(self.update_op, inputs, control_inputs=after, **attributes)


@dataclass(frozen=True)
class SGD(Optimizer):
    name: str = "sgd"
    default_learning_rate: float = 0.1
    update_op: ClassVar[str] = "apply_sgd"


@dataclass(frozen=True)
class Momentum(Optimizer):
    """Heavy-ball momentum as TF's ApplyMomentum: v = mu*v + g; w -= lr*v."""

    name: str = "momentum"
    default_learning_rate: float = 0.1
    momentum: float = 0.9
    update_op: ClassVar[str] = "apply_momentum"

    def slots(self, variable, value):
        return {f"{variable}/momentum": np.zeros_like(value)}

    def hyperparameters(self) -> dict[str, float]:
        return {"momentum": self.momentum}


@dataclass(frozen=True)
class Adam(Optimizer):
    name: str = "adam"
    default_learning_rate: float = 0.001
    beta1: float = 0.9
    beta2: float = 0.999
    epsilon: float = 1e-7  # Keras's default
    update_op: ClassVar[str] = "apply_adam"

    def slots(self, variable, value):
        return {
            f"{variable}/adam_m": np.zeros_like(value),
            f"{variable}/adam_v": np.zeros_like(value),
            f"{variable}/adam_t": np.zeros((), dtype=np.int64),
        }

    def hyperparameters(self) -> dict[str, float]:
        return {"beta1": self.beta1, "beta2": self.beta2, "epsilon": self.epsilon}


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
    compute_dtype: str | None = None,
) -> list:
    """One update per parameter; with a 16-bit ``compute_dtype`` (mixed precision) each
    update of a master weight is followed by the refresh of its 16-bit copy."""
    updates = []
    for name, grad in zip(params, grads):
        update = optimizer.emit_update(params[name], grad, learning_rate, name, after)
        updates.append(update)
        if compute_dtype is not None:
            updates.append(emit_refresh(params[name], name, compute_dtype, update))
    return updates


def init_slots(optimizer: Optimizer, params: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    state: dict[str, np.ndarray] = {}
    for name, value in params.items():
        state.update(optimizer.slots(name, value))
    return state


_ = ops  # the update ops are registered by importing workbench.ir.ops
