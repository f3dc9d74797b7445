"""Mixed precision on the devices: the loss scaler, skipped steps, and one device's step.

``--precision mixed-fp16|mixed-bf16`` (docs/guide/command-line.md, "Mixed precision"): the
gradient graph computes in 16 bits on each parameter's 16-bit copy and hands back float32
gradients already divided by the loss scale S; the exchange and the update then run in float32
as without mixed precision. The scaler is the one the half-precision compression codecs use
(:class:`~workbench.parallel.collectives.compression.loss_scaling.DynamicLossScaler`): a step
whose gradients hold inf or NaN is skipped and S halves. Data-parallel replicas test the
all-reduced sum, which every replica holds alike, so every replica skips alike.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from workbench.events import EventLog
from workbench.ir import Executable
from workbench.optim import compute_copies, compute_copy_name, compute_dtype
from workbench.parallel.collectives.compression.loss_scaling import DynamicLossScaler
from workbench.training.gradient_accumulation import GradientSum, mean_loss, micro_slices
from workbench.training.graphs import (
    DROPOUT_SEED,
    INPUTS,
    LABELS,
    LEARNING_RATE,
    LOSS_SCALE,
    build_training_graph,
    build_update_graph,
    gradient_name,
)
from workbench.training.session import TrainingSession, dropout_seed


def mixed_precision_scaler(precision: str) -> DynamicLossScaler | None:
    """A fresh loss scaler for ``--precision`` mixed-*, None for fp32."""
    return None if compute_dtype(precision) is None else DynamicLossScaler()


def all_finite(xp: Any, arrays: Iterable[Any]) -> bool:
    """Whether no array holds inf or NaN (one device sync per array)."""
    return all(bool(xp.all(xp.isfinite(array))) for array in arrays)


def refresh_compute_copy(state: dict[str, Any], name: str) -> None:
    """Round the master ``name`` of a variable store into its 16-bit copy, if it has one (a
    replica whose masters arrived from elsewhere, as central storage's broadcast)."""
    copy = compute_copy_name(name)
    if copy in state:
        state[copy][...] = state[name]


def scaler_reports(scaler: DynamicLossScaler, applied: bool) -> list[tuple[str, float]]:
    """The scalars a step reports: ``loss_scale`` every step, ``skipped_steps`` (cumulative)
    at a skipped one."""
    reports = [("loss_scale", scaler.scale)]
    if not applied:
        reports.append(("skipped_steps", float(scaler.skipped_steps)))
    return reports


def precision_summary(precision: str, log: EventLog) -> dict[str, Any]:
    """The ``--json`` ``precision`` object of a mixed-precision run (nothing for fp32): the
    mode, the dtype forward and backward computed in, the steps skipped on overflow and the
    final loss scale."""
    half = compute_dtype(precision)
    if half is None:
        return {}
    scales = log.scalars("loss_scale")
    return {
        "precision": {
            "mode": precision,
            "compute_dtype": half,
            # A step recomputed after a recovery reports again: count steps, not reports.
            "skipped_steps": len({e.step for e in log.scalars("skipped_steps")}),
            "loss_scale": max(scales, key=lambda e: e.step).value if scales else None,
        }
    }


class LossScaledStep:
    """One device's mixed-precision step on ``session``'s variables: the 16-bit gradient graph
    (in ``micro_steps`` micro-steps with ``--accumulate``), the overflow test, then the float32
    update, which refreshes the 16-bit copies. The copies join the session's variable store
    (its parameters, slots and checkpoints stay those of an fp32 run: they leave them out).

    Examples
    --------
    >>> from workbench.models import mlp
    >>> from workbench.optim import SGD
    >>> session = TrainingSession(mlp((4,), 3, (8,)), SGD(), 4, "float32", seed=0)
    >>> mixed = LossScaledStep(session, "mixed-fp16", overflow_steps=(1,))
    >>> x, y = np.ones((4, 4), np.float32), np.array([0, 2, 1, 0])
    >>> [mixed.step(x, y, 0.1, step) > 0 for step in range(3)]
    [True, True, True]
    >>> mixed.scaler.skipped_steps, mixed.scaler.scale
    (1, 32768.0)
    """

    def __init__(
        self,
        session: TrainingSession,
        precision: str,
        micro_steps: int = 1,
        overflow_steps: Sequence[int] = (),
    ) -> None:
        self.session, self.micro_steps = session, micro_steps
        model, dtype = session.model, session.dtype
        training = build_training_graph(
            model,
            None,
            session.batch_size // micro_steps,
            dtype,
            recompute=session.recompute,
            precision=precision,
        )
        self.names = training.parameter_names
        self.gradients = Executable(training.graph)
        self.update = Executable(
            build_update_graph(model, session.optimizer, dtype, precision=precision)
        )
        masters = {name: session.state[name] for name in self.names}
        session.state.update(compute_copies(masters, compute_dtype(precision)))
        self.scaler = DynamicLossScaler()
        self.overflow_steps = frozenset(overflow_steps)
        self._scalar = np.dtype(dtype).type
        self.applied = True  # whether the last step's update applied

    def reports(self) -> list[tuple[str, float]]:
        """The last step's scalars (``loss_scale``; ``skipped_steps`` if it was skipped)."""
        return scaler_reports(self.scaler, self.applied)

    def step(self, inputs: Any, labels: Any, learning_rate: float, step: int) -> float:
        """One training step on a batch; returns its loss. Whether the update applied, the
        scaler says (``skipped_steps``)."""
        xp = self.session.xp
        state = self.session.state
        with np.errstate(over="ignore", invalid="ignore"):  # an overflow is news: it skips
            gradients, loss = self._gradients(inputs, labels, step, state)
        if step in self.overflow_steps:  # --simulate-overflow: as if backward overflowed
            gradients[self.names[0]] = gradients[self.names[0]] + np.inf
        self.applied = self.scaler.update(all_finite(xp, gradients.values()))
        if self.applied:
            feeds = {gradient_name(name): gradients[name] for name in self.names}
            feeds[LEARNING_RATE] = xp.asarray(self._scalar(learning_rate))
            self.update.run(feeds, state, xp, ledger=self.session.ledger)
        return loss

    def _gradients(
        self, inputs: Any, labels: Any, step: int, state: dict[str, Any]
    ) -> tuple[dict[str, Any], float]:
        session, xp = self.session, self.session.xp
        total = GradientSum(self.micro_steps, xp, session.ledger)
        slices = list(micro_slices(len(labels), self.micro_steps))
        losses, means = [], {}
        for micro_step, rows in enumerate(slices):
            feeds = {
                INPUTS: inputs[rows],
                LABELS: labels[rows],
                LOSS_SCALE: xp.asarray(self._scalar(self.scaler.scale)),
            }
            if session.model.uses_dropout:
                feeds[DROPOUT_SEED] = dropout_seed(session.seed, step)
            out = self.gradients.run(feeds, state, xp, ledger=session.ledger)
            losses.append(float(out["loss"]))
            last = micro_step == len(slices) - 1
            for name in self.names:
                gradient = out[gradient_name(name)]
                if last:
                    one = self.micro_steps == 1
                    means[name] = gradient if one else total.finish(name, gradient)
                else:
                    total.add(name, gradient)
        return means, mean_loss(losses)
