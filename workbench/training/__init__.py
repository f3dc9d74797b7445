"""Training: the step graphs built from a model and optimizer, and the one-device session.

What flows in: a ``Sequential`` model, an optimizer, a batch size and dtype. What flows out: a
verified, pass-optimised training graph and a session that runs it against resident variables.
"""

from workbench.training.graphs import (
    DROPOUT_SEED,
    INPUTS,
    LABELS,
    LEARNING_RATE,
    TrainingGraph,
    build_evaluation_graph,
    build_training_graph,
)
from workbench.training.session import TrainingSession, dropout_seed

__all__ = [
    "DROPOUT_SEED",
    "INPUTS",
    "LABELS",
    "LEARNING_RATE",
    "TrainingGraph",
    "TrainingSession",
    "build_evaluation_graph",
    "build_training_graph",
    "dropout_seed",
]
