"""Optimizers (state as slot variables updated in place) and learning-rate schedules."""

from workbench.optim.optimizers import (
    OPTIMIZER_NAMES,
    SGD,
    Adam,
    Momentum,
    Optimizer,
    OptimizerError,
    emit_updates,
    init_slots,
    make_optimizer,
)
from workbench.optim.schedules import DECAY_RULES, SCALING_RULES, LearningRateSchedule

__all__ = [
    "DECAY_RULES",
    "OPTIMIZER_NAMES",
    "SCALING_RULES",
    "SGD",
    "Adam",
    "LearningRateSchedule",
    "Momentum",
    "Optimizer",
    "OptimizerError",
    "emit_updates",
    "init_slots",
    "make_optimizer",
]
