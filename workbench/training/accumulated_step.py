"""One device's step with ``--accumulate K``: K micro-steps of the gradient program on
consecutive slices of the batch, their gradients summed, then one update of the session's
variables on the mean (:mod:`workbench.training.gradient_accumulation`).

Without accumulation a session runs one fused graph (forward, backward, update); here the
update is the same optimizer step as a graph of its own, fed the mean gradients, so the
variables and slots are the session's and checkpoints, evaluation and resuming see no
difference.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workbench.ir import Executable
from workbench.training.gradient_accumulation import GradientSum, mean_loss, micro_slices
from workbench.training.graphs import (
    DROPOUT_SEED,
    INPUTS,
    LABELS,
    LEARNING_RATE,
    build_training_graph,
    build_update_graph,
    gradient_name,
)
from workbench.training.session import TrainingSession, dropout_seed


class AccumulatedStep:
    """Steps of ``session`` in ``micro_steps`` micro-steps of ``batch_size // micro_steps``
    rows each.

    Examples
    --------
    >>> import numpy as np
    >>> from workbench.models import mlp
    >>> from workbench.optim import SGD
    >>> session = TrainingSession(mlp((4,), 3, (8,)), SGD(), 4, "float64", seed=0)
    >>> loss = AccumulatedStep(session, 2).step(np.ones((4, 4)), np.array([0, 2, 1, 0]), 0.1, 0)
    >>> loss > 0
    True
    """

    def __init__(self, session: TrainingSession, micro_steps: int) -> None:
        self.session, self.micro_steps = session, micro_steps
        model, dtype = session.model, session.dtype
        training = build_training_graph(
            model, None, session.batch_size // micro_steps, dtype, recompute=session.recompute
        )
        self.names = training.parameter_names
        self.gradients = Executable(training.graph)
        self.update = Executable(build_update_graph(model, session.optimizer, dtype))
        self._learning_rate_dtype = np.dtype(dtype).type

    def step(self, inputs: Any, labels: Any, learning_rate: float, step: int) -> float:
        """One training step on a batch in K micro-steps; returns the loss over the batch."""
        session = self.session
        xp, state = session.xp, session.state
        ledger = session.ledger  # where the device counts the step's values, if it does
        total = GradientSum(self.micro_steps, xp, ledger)
        slices = list(micro_slices(len(labels), self.micro_steps))
        losses, means = [], {}
        for micro_step, rows in enumerate(slices):
            feeds = {INPUTS: inputs[rows], LABELS: labels[rows]}
            if session.model.uses_dropout:
                # Every micro-step draws from the step's seed, as every replica does.
                feeds[DROPOUT_SEED] = dropout_seed(session.seed, step)
            out = self.gradients.run(feeds, state, xp, ledger=ledger)
            losses.append(float(out["loss"]))
            last = micro_step == len(slices) - 1
            for name in self.names:
                gradient = out[gradient_name(name)]
                if last:
                    means[gradient_name(name)] = total.finish(name, gradient)
                else:
                    total.add(name, gradient)
        means[LEARNING_RATE] = xp.asarray(self._learning_rate_dtype(learning_rate))
        self.update.run(means, state, xp, ledger=ledger)
        return mean_loss(losses)
