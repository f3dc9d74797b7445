"""Optimizer steps in the graph match the textbook update computed by hand."""

import itertools

import numpy as np
import pytest

from workbench.ir import Executable, GraphBuilder
from workbench.optim import (
    LearningRateSchedule,
    OptimizerError,
    emit_updates,
    init_slots,
    make_optimizer,
)


def _run_steps(name, gradients, lr=0.1):
    optimizer = make_optimizer(name)
    start = {"w": np.array([1.0, -2.0, 0.5])}
    state = {"w": start["w"].copy(), **init_slots(optimizer, start)}
    b = GraphBuilder()
    w = b.variable("w", (3,), "float64")
    g = b.placeholder("g", (3,), "float64")
    rate = b.placeholder("lr", (), "float64")
    emit_updates(optimizer, {"w": w}, [g], rate, after=[])
    program = Executable(b.build({}))
    for gradient in gradients:
        program.run({"g": gradient, "lr": np.float64(lr)}, state)
    return state["w"]


GRADIENTS = [np.array([0.1, -0.3, 0.2]), np.array([-0.2, 0.1, 0.4]), np.array([0.3, 0.3, -0.1])]


def test_sgd():
    expected = np.array([1.0, -2.0, 0.5]) - 0.1 * sum(GRADIENTS)
    np.testing.assert_allclose(_run_steps("sgd", GRADIENTS), expected, rtol=1e-15)


def test_momentum():
    w, v = np.array([1.0, -2.0, 0.5]), np.zeros(3)
    for g in GRADIENTS:
        v = 0.9 * v + g
        w = w - 0.1 * v
    np.testing.assert_allclose(_run_steps("momentum", GRADIENTS), w, rtol=1e-15)


def test_adam_slots_are_created_per_parameter():
    slots = init_slots(make_optimizer("adam"), {"a/kernel": np.zeros((2, 2))})
    assert set(slots) == {"a/kernel/adam_m", "a/kernel/adam_v", "a/kernel/adam_t"}
    assert _run_steps("adam", GRADIENTS).shape == (3,)


def test_unknown_optimizer_lists_choices():
    with pytest.raises(OptimizerError, match="sgd, momentum, adam"):
        make_optimizer("rmsprop")


def test_goyal_linear_scaling_with_warmup():
    schedule = LearningRateSchedule(0.1, 8192, warmup_steps=10, scaling="linear")
    assert schedule.target == pytest.approx(3.2)
    assert schedule(0) == pytest.approx(0.1)
    assert schedule(5) == pytest.approx(0.1 + (3.2 - 0.1) / 2)
    assert schedule(10) == schedule(1000) == pytest.approx(3.2)


def test_cosine_decay_after_warmup_reaches_zero():
    schedule = LearningRateSchedule(0.5, 32, warmup_steps=2, decay="cosine", total_steps=12)
    rates = [schedule(s) for s in range(13)]
    assert rates[2] == pytest.approx(0.5)
    assert all(a >= b for a, b in itertools.pairwise(rates[2:]))  # non-increasing after warm-up
    assert rates[12] == pytest.approx(0.0, abs=1e-12)
