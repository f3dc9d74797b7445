"""An optimizer is its update op and that op's hyperparameters: the base class emits the
update, so an optimizer declares only what differs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from workbench.ir import GraphBuilder
from workbench.optim import Optimizer, emit_updates


@dataclass(frozen=True)
class HeavyMomentum(Optimizer):
    name: str = "heavy"
    default_learning_rate: float = 0.1
    update_op: ClassVar[str] = "apply_momentum"

    def hyperparameters(self) -> dict[str, float]:
        return {"momentum": 0.99}


def _updates(optimizer):
    b = GraphBuilder()
    w = b.variable("w", (3,), "float32")
    g = b.placeholder("g", (3,), "float32")
    rate = b.placeholder("lr", (), "float32")
    emit_updates(optimizer, {"w": w}, [g], rate, after=["g"])
    return [node for node in b.build({}).nodes if node.op.startswith("apply")]


def test_an_optimizer_declares_its_op_and_hyperparameters_only():
    (update,) = _updates(HeavyMomentum())
    assert (update.op, update.attrs, update.control_inputs) == (
        "apply_momentum",
        {"var": "w", "momentum": 0.99},
        ("g",),
    )
