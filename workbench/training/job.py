"""What a strategy is asked to do: train this model on these batches for these steps."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from workbench.config import RunConfig
from workbench.data import Dataset, GlobalBatchSampler
from workbench.models import Sequential
from workbench.optim import LearningRateSchedule, Optimizer

Progress = Callable[[str], None]


@dataclass
class TrainingJob:
    config: RunConfig
    model: Sequential
    optimizer: Optimizer
    dataset: Dataset
    sampler: GlobalBatchSampler
    schedule: LearningRateSchedule
    first_step: int
    total_steps: int
    device_type: str
    xp: Any
    initial_parameters: dict[str, np.ndarray] | None = None
    initial_optimizer_state: dict[str, np.ndarray] | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    # Wall-clock origin: events from worker processes (and hosts) share this time axis.
    clock_origin: float = field(default_factory=time.time)
    # The Dask dashboard of the cluster the run uses, once it has one (the panel links to it).
    dashboard_link: str | None = None

    def clock(self) -> float:
        """Seconds since the run started: the time axis of every event."""
        return time.time() - self.clock_origin


class TrainedModel(Protocol):
    """What a strategy hands back: the final variables, gathered on the host."""

    def parameters(self) -> dict[str, np.ndarray]: ...

    def optimizer_state(self) -> dict[str, np.ndarray]: ...

    def evaluate(self, inputs, labels) -> tuple[float, float]: ...


def epoch_progress(job: TrainingJob, step: int, loss: float, name: str) -> str | None:
    """A progress line at each epoch boundary and at the last step, else None."""
    per_epoch = job.sampler.steps_per_epoch
    done = step + 1
    if done % per_epoch and done != job.total_steps:
        return None
    epoch = (done - 1) // per_epoch + 1
    epochs = -(-job.total_steps // per_epoch)
    return (
        f"[{name}] epoch {epoch}/{epochs}  step {done}/{job.total_steps}  "
        f"loss {loss:.4f}  {job.clock():.1f}s"
    )
