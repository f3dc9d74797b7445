"""A training run's checkpoint: its variables, optimizer slots and the step it reached, plus
what makes continuing from it exact (the sampler's and dropout's seeds: both are pure
functions of the seed and the step, docs/architecture/determinism.md, "Same data, same result")."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from workbench.checkpoint import save_checkpoint
from workbench.config import RunConfig


def rng_state_at(config: RunConfig, step: int) -> dict:
    """The random state a run continues from at ``step``."""
    return {
        "sampler": {
            "seed": config.seed,
            "next_step": step,
            "permutation": "default_rng([seed, epoch])",
        },
        "dropout": {"seed": config.seed, "stream": "philox(seed*2**32+step)"},
    }


def save_run_checkpoint(
    directory: str | Path,
    config: RunConfig,
    step: int,
    parameters: dict[str, np.ndarray],
    optimizer_state: dict[str, np.ndarray],
) -> Path:
    """Write the run's state after ``step`` steps to ``directory`` (atomically)."""
    return save_checkpoint(
        directory,
        params=parameters,
        optimizer_state=optimizer_state,
        step=step,
        rng_state=rng_state_at(config, step),
        config=config.to_dict(),
    )
