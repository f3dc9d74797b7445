"""A model, its optimizer and its variables resident on one device, ready to run steps.

This is the unit every strategy builds on: one-device runs one session; data-parallel
strategies run one per replica. Batches are fed as arrays of the session's array module.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from workbench.ir import Executable, Graph
from workbench.ir.memory import MemoryLedger
from workbench.models import Sequential
from workbench.optim import Optimizer, init_slots, without_compute_copies
from workbench.runtime import to_host
from workbench.training.graphs import (
    DROPOUT_SEED,
    INPUTS,
    LABELS,
    LEARNING_RATE,
    build_evaluation_graph,
    build_training_graph,
)


def dropout_seed(seed: int, step: int) -> np.int64:
    """A distinct, reproducible dropout stream per (run seed, global step)."""
    return np.int64((seed % 2**31) * 2**32 + step)


class TrainingSession:
    """Training and evaluation executables plus the variable store, on one device.

    Examples
    --------
    >>> import numpy as np
    >>> from workbench.models import mlp
    >>> from workbench.optim import SGD
    >>> session = TrainingSession(mlp((4,), 3, (8,)), SGD(), batch_size=2, dtype="float64",
    ...                           seed=0)
    >>> loss = session.step(np.ones((2, 4)), np.array([0, 2]), learning_rate=0.1, step=0)
    >>> float(loss) > 0
    True
    """

    def __init__(
        self,
        model: Sequential,
        optimizer: Optimizer,
        batch_size: int,
        dtype: str,
        seed: int,
        xp: Any = np,
        recompute: str = "none",
    ) -> None:
        self.model, self.optimizer, self.batch_size = model, optimizer, batch_size
        self.dtype, self.seed, self.xp = dtype, seed, xp
        self.recompute = recompute  # the --recompute policy its training graphs apply
        # The global step its variables are of when that is not the run's last completed step
        # (a run stopped while a device was stalled keeps its restart point's variables).
        self.variables_step: int | None = None
        # Where its steps count their values, when the device measures its memory
        # (workbench.runtime.device_memory); None: not counted.
        self.ledger: MemoryLedger | None = None
        self.training = build_training_graph(
            model, optimizer, batch_size, dtype, recompute=recompute
        )
        self._train = Executable(self.training.graph)
        self._evaluators: dict[int, Executable] = {}
        params = model.init_parameters(seed, dtype)
        self.state: dict[str, Any] = {}
        self.load_state(params, init_slots(optimizer, params))
        self._learning_rate_dtype = np.dtype(dtype).type

    @property
    def input_dtype(self) -> str:
        return "int64" if self.model.takes_integer_input else self.dtype

    @property
    def graph(self) -> Graph:
        return self.training.graph

    def load_state(self, params: Mapping[str, np.ndarray], slots: Mapping[str, np.ndarray]):
        expected = set(self.model.parameter_shapes())
        if set(params) != expected:
            missing, extra = expected - set(params), set(params) - expected
            raise ValueError(
                f"parameters do not fit the model: missing {sorted(missing)}, "
                f"unexpected {sorted(extra)}"
            )
        for name, value in {**params, **slots}.items():
            # Own, writable, contiguous buffers: update ops write into them in place.
            self.state[name] = self.xp.array(value, copy=True, order="C")

    def step(self, inputs, labels, learning_rate: float, step: int):
        """One training step on a batch; returns the loss as a device scalar."""
        feeds = {
            INPUTS: inputs,
            LABELS: labels,
            LEARNING_RATE: self.xp.asarray(self._learning_rate_dtype(learning_rate)),
        }
        if self.model.uses_dropout:
            feeds[DROPOUT_SEED] = dropout_seed(self.seed, step)
        return self._train.run(feeds, self.state, self.xp, ledger=self.ledger)["loss"]

    def evaluate(self, inputs, labels, chunk: int = 1000) -> tuple[float, float]:
        """Mean loss and accuracy over arrays of any length, in chunks of at most ``chunk``."""
        total_loss, correct, count = 0.0, 0, len(labels)
        for begin in range(0, count, chunk):
            x, y = inputs[begin : begin + chunk], labels[begin : begin + chunk]
            size = len(y)
            if size not in self._evaluators:
                graph = build_evaluation_graph(self.model, size, self.dtype)
                self._evaluators[size] = Executable(graph)
            out = self._evaluators[size].run({INPUTS: x, LABELS: y}, self.state, self.xp)
            total_loss += float(out["loss"]) * size
            correct += int((out["predictions"] == y).sum())
        return total_loss / count, correct / count

    def parameters(self) -> dict[str, np.ndarray]:
        return {name: to_host(self.state[name]) for name in self.training.parameter_names}

    def optimizer_state(self) -> dict[str, np.ndarray]:
        """The optimizer's slots (not mixed precision's 16-bit copies: the masters give them)."""
        names = set(self.training.parameter_names)
        slots = without_compute_copies(self.state)
        return {name: to_host(value) for name, value in slots.items() if name not in names}
