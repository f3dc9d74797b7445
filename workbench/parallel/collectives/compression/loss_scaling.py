"""Dynamic loss scaling for 16-bit gradients (Micikevicius et al. 2018, "Mixed Precision
Training"; PyTorch's ``GradScaler``).

Small gradients underflow to zero in float16 and large ones overflow to inf. Before the cast,
every replica multiplies its gradients by a scale S: the same as scaling the loss by S, since
gradients are linear in the loss, but without touching the graph. After the all-reduce the sum
is divided by S again (S is a power of two, so that is exact). A sum holding inf or NaN means S
was too large: the step's update is skipped (every replica sees the same sum, so every replica
skips) and S halves. After ``growth_interval`` good steps in a row S doubles, to use the range
again. The defaults are ``GradScaler``'s: S = 2**16, growth interval 2000, factors 2 and 0.5.

A plain state machine: the replica feeds it "was the sum finite?" once a step.
"""

from __future__ import annotations

from dataclasses import dataclass

# Below this, S cannot shrink further: float16's smallest subnormal. A run whose gradients are
# NaN whatever the scale keeps skipping at this scale instead of dividing by zero.
MINIMUM_SCALE = 2.0**-24


@dataclass
class DynamicLossScaler:
    """The scale S and the counts that move it.

    Examples
    --------
    >>> scaler = DynamicLossScaler(scale=8.0, growth_interval=2)
    >>> scaler.update(finite=False), scaler.scale, scaler.skipped_steps
    (False, 4.0, 1)
    >>> scaler.update(True), scaler.update(True), scaler.scale
    (True, True, 8.0)
    """

    scale: float = 2.0**16
    growth_interval: int = 2000
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    good_steps: int = 0  # finite steps since S last changed
    skipped_steps: int = 0

    def update(self, finite: bool) -> bool:
        """Record one step's outcome; True if its update applies (the sum was finite)."""
        if not finite:
            self.scale = max(self.scale * self.backoff_factor, MINIMUM_SCALE)
            self.good_steps = 0
            self.skipped_steps += 1
            return False
        self.good_steps += 1
        if self.good_steps >= self.growth_interval:
            self.scale *= self.growth_factor
            self.good_steps = 0
        return True
