"""Periodic checkpoints of a cluster run, and the point a recovery restarts from.

Every ``--checkpoint-every`` steps (by default about once a minute of training), the client
gathers the devices' variables and optimizer slots at a step boundary and writes them in the
checkpoint format (atomic, checksummed) to ``<run directory>/checkpoints/step-<N>``, keeping
the last two; with ``--save DIR`` the newest also replaces ``DIR``, so a run killed outright
can be resumed from it. The newest one is also the restart point of a recovery: it is read back
from disk (checksums verified) when it was written, from memory otherwise. Before the first
checkpoint the restart point is the run's own starting point.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np

from workbench.checkpoint import load_checkpoint
from workbench.training.job import TrainingJob
from workbench.training.run_checkpoint import save_run_checkpoint

AUTO_INTERVAL_S = 60.0  # without --checkpoint-every: about once a minute of training
KEPT = 2


class PeriodicCheckpoints:
    def __init__(self, job: TrainingJob) -> None:
        self.job = job
        self.every = job.config.checkpoint_every
        self.root = Path(job.checkpoint_directory) if job.checkpoint_directory else None
        self.step = job.first_step
        self._memory = (job.initial_parameters, job.initial_optimizer_state)
        self._path: Path | None = None
        self._saved_at = job.clock()
        self.written: list[Path] = []

    def steps_until_due(self, step: int) -> int | None:
        """How many steps from ``step`` to the next checkpoint boundary (None: time decides)."""
        if self.every is None:
            return None
        return self.every - step % self.every

    def due(self, step: int) -> bool:
        """Whether the boundary before ``step`` gets a checkpoint."""
        if step <= self.step or step >= self.job.total_steps:
            return False  # nothing new, or the run's own end (execute_run saves that one)
        if self.every is not None:  # a boundary crossed (free-running runs skip steps)
            return step // self.every > self.step // self.every
        return self.job.clock() - self._saved_at >= AUTO_INTERVAL_S

    def save(self, step: int, parameters: dict, optimizer_state: dict) -> None:
        config = self.job.config
        self.step, self._memory = step, (parameters, optimizer_state)
        self._saved_at = self.job.clock()
        if self.root is not None:
            self._path = self.root / f"step-{step:08d}"
            save_run_checkpoint(self._path, config, step, parameters, optimizer_state)
            self.written.append(self._path)
            for old in self.written[:-KEPT]:
                shutil.rmtree(old, ignore_errors=True)
            self.written = self.written[-KEPT:]
        if config.save:
            save_run_checkpoint(config.save, config, step, parameters, optimizer_state)

    def restart_point(self) -> tuple[int, dict[str, np.ndarray] | None, dict | None]:
        """(step, variables, optimizer slots) of the newest checkpoint; None variables mean
        the run's fresh initialisation (no checkpoint before the failure)."""
        if self._path is not None:
            checkpoint = load_checkpoint(self._path)
            return checkpoint.step, checkpoint.params, checkpoint.optimizer_state
        return self.step, *self._memory
