"""Learning-rate schedules, evaluated on the host and fed to the graph each step.

``linear`` scaling multiplies the base rate by global_batch / 256 and ramps up to it linearly
over the warm-up steps, starting from the base rate (Goyal et al. 2017, "Accurate, Large
Minibatch SGD", section 2.2: the linear scaling rule with gradual warm-up). ``cosine`` decay
then anneals the rate to zero over the remaining steps (Loshchilov & Hutter 2017, SGDR, without
restarts).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

REFERENCE_BATCH = 256
SCALING_RULES = ("none", "linear")
DECAY_RULES = ("none", "cosine")


@dataclass(frozen=True)
class LearningRateSchedule:
    base: float
    global_batch_size: int
    warmup_steps: int = 0
    scaling: str = "none"
    decay: str = "none"
    total_steps: int = 0

    @classmethod
    def from_config(cls, config, optimizer, total_steps: int) -> LearningRateSchedule:
        """The schedule a run's flags describe (``--lr`` or the optimizer's default rate)."""
        return cls(
            config.lr or optimizer.default_learning_rate,
            config.batch_size,
            config.warmup_steps,
            config.lr_scaling,
            config.lr_decay,
            total_steps,
        )

    @property
    def target(self) -> float:
        if self.scaling == "linear":
            return self.base * self.global_batch_size / REFERENCE_BATCH
        return self.base

    def __call__(self, step: int) -> float:
        """Learning rate for the 0-based global ``step``.

        Examples
        --------
        >>> schedule = LearningRateSchedule(0.1, 1024, warmup_steps=4, scaling="linear")
        >>> [round(schedule(s), 3) for s in range(6)]
        [0.1, 0.175, 0.25, 0.325, 0.4, 0.4]
        >>> cosine = LearningRateSchedule(0.1, 32, decay="cosine", total_steps=4)
        >>> [round(cosine(s), 4) for s in range(4)]
        [0.1, 0.0854, 0.05, 0.0146]
        """
        if self.warmup_steps and step < self.warmup_steps:
            # Goyal et al. ramp up from the unscaled rate; without scaling we ramp from
            # target / warmup_steps so that the first step already moves the parameters.
            start = self.base if self.scaling == "linear" else self.target / self.warmup_steps
            return start + (self.target - start) * step / self.warmup_steps
        if self.decay == "cosine" and self.total_steps > self.warmup_steps:
            progress = (step - self.warmup_steps) / (self.total_steps - self.warmup_steps)
            return self.target * 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))
        return self.target
