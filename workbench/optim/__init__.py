"""Optimizers (state as slot variables updated in place) and learning-rate schedules."""

from workbench.optim.master_weights import (
    PRECISION_DTYPES,
    compute_copies,
    compute_copy_name,
    compute_dtype,
    is_compute_copy,
    without_compute_copies,
)
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
    "PRECISION_DTYPES",
    "SCALING_RULES",
    "SGD",
    "Adam",
    "LearningRateSchedule",
    "Momentum",
    "Optimizer",
    "OptimizerError",
    "compute_copies",
    "compute_copy_name",
    "compute_dtype",
    "emit_updates",
    "init_slots",
    "is_compute_copy",
    "make_optimizer",
    "without_compute_copies",
]
