"""Ops that update device-resident variables in place: assignment and optimizer steps.

These mirror TF's resource ``Apply*`` kernels: the update happens where the variable lives,
without materialising a new parameter array each step. Slot variables (momentum, Adam moments
and step count) live in the same store under ``<variable>/<slot>``. Each op takes the variable's
read as its first input so placement keeps the update next to the variable.
"""

from __future__ import annotations

from workbench.ir.builder import Tensor
from workbench.ir.rules import NOT_DIFFERENTIABLE, ShapeError, define_op, same_dtype


def _update_shape(op: str):
    def rule(types, **attrs):
        variable, *rest = types
        for t in rest:
            if t.shape not in (variable.shape, ()):
                raise ShapeError(f"{op}: {t} does not fit variable {variable}")
        same_dtype(op, *types)
        return ()

    return rule


def assign(variable: Tensor, value: Tensor, var: str):
    return variable.builder.emit("assign", [variable, value], var=var)


def apply_sgd(variable: Tensor, gradient: Tensor, learning_rate: Tensor, var: str):
    return variable.builder.emit("apply_sgd", [variable, gradient, learning_rate], var=var)


def apply_momentum(variable, gradient, learning_rate, var: str, momentum: float):
    return variable.builder.emit(
        "apply_momentum", [variable, gradient, learning_rate], var=var, momentum=momentum
    )


def apply_adam(
    variable, gradient, learning_rate, var: str, beta1: float, beta2: float, epsilon: float
):
    return variable.builder.emit(
        "apply_adam",
        [variable, gradient, learning_rate],
        var=var,
        beta1=beta1,
        beta2=beta2,
        epsilon=epsilon,
    )


def _slot(state, var, name):
    try:
        return state[f"{var}/{name}"]
    except KeyError:
        raise KeyError(f"optimizer slot {var}/{name} is missing from the variable store") from None


def _assign_impl(xp, variable, value, *, state, var):
    state[var][...] = value


def _sgd_impl(xp, variable, gradient, learning_rate, *, state, var):
    weights = state[var]
    weights -= learning_rate * gradient


def _momentum_impl(xp, variable, gradient, learning_rate, *, state, var, momentum):
    velocity = _slot(state, var, "momentum")
    velocity *= momentum
    velocity += gradient
    state[var] -= learning_rate * velocity


def _adam_impl(xp, variable, gradient, learning_rate, *, state, var, beta1, beta2, epsilon):
    # Kingma & Ba, Algorithm 1, with the bias corrections folded into the step size.
    first = _slot(state, var, "adam_m")
    second = _slot(state, var, "adam_v")
    step = _slot(state, var, "adam_t")
    step += 1
    t = float(step)
    first *= beta1
    first += (1 - beta1) * gradient
    second *= beta2
    second += (1 - beta2) * (gradient * gradient)
    step_size = learning_rate * ((1 - beta2**t) ** 0.5 / (1 - beta1**t))
    state[var] -= step_size * (first / (xp.sqrt(second) + epsilon))


for _name, _impl in (
    ("assign", _assign_impl),
    ("apply_sgd", _sgd_impl),
    ("apply_momentum", _momentum_impl),
    ("apply_adam", _adam_impl),
):
    define_op(
        _name,
        impl=_impl,
        shape=_update_shape(_name),
        vjp=NOT_DIFFERENTIABLE,
        effectful=True,
        stateful=True,
    )
