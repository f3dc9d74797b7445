"""The run configuration shared by ``dtrain run``, ``%dtrain`` and the Python API, and its one
validation function.

Everything a user can get wrong is checked here, before any data is loaded or any cluster
starts; each :class:`ConfigError` names the flag and the allowed values.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from workbench.data import DATASET_FORMS, DatasetError, parse_dataset_spec
from workbench.models import MODEL_NAMES
from workbench.optim import DECAY_RULES, OPTIMIZER_NAMES, SCALING_RULES

DTYPE_NAMES = ("float32", "float64")
COMPRESSION_NAMES = ("none", "float16")
ALLREDUCE_NAMES = ("ring", "hierarchical-copy", "reduce-to-one")
MODE_NAMES = ("sync", "async")
REPLICATION_NAMES = ("in-graph", "between-graph")
SCHEDULE_NAMES = ("gpipe", "1f1b")
DEVICE_TYPE_NAMES = ("auto", "cpu", "gpu")
DEFAULT_EPOCHS = 10


class ConfigError(ValueError):
    """An invalid flag or option; ``field`` is the flag as the user typed it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True)
class RunConfig:
    """Every option of a training run; field names follow the command-line flags."""

    strategy: str = "one-device"
    devices: int = 1
    model: str = "mlp"
    hidden: tuple[int, ...] = (512, 512)
    dataset: str = "digits"
    epochs: int | None = None
    steps: int | None = None
    batch_size: int = 32
    lr: float | None = None
    optimizer: str = "momentum"
    seed: int = 0
    dtype: str = "float32"
    allreduce: str = "ring"
    ps: int = 1
    mode: str = "sync"
    staleness: int | None = None  # async parameter servers: None = unbounded
    replication: str = "between-graph"
    stages: int = 2
    microbatches: int = 4
    schedule: str = "gpipe"
    device_type: str = "auto"
    cluster: str | None = None
    save: str | None = None
    resume: str | None = None
    warmup_steps: int = 0
    lr_scaling: str = "none"
    lr_decay: str = "cosine"
    stall_timeout: float = 60.0
    bucket_mb: float = 25.0
    compression: str = "none"
    hosts: int = 2
    json: bool = False
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def replace(self, **changes: Any) -> RunConfig:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (as stored in checkpoints and run records)."""
        data = dataclasses.asdict(self)
        data.pop("extra")
        data["hidden"] = list(self.hidden)
        return data


def _choice(flag: str, value: Any, allowed: tuple[str, ...], what: str) -> None:
    if value not in allowed:
        raise ConfigError(flag, f"unknown {what} {value!r}; choose one of: {', '.join(allowed)}")


def _at_least(flag: str, value: Any, minimum: int | float, kind: type = int) -> None:
    if isinstance(value, bool) or not isinstance(value, kind) or value < minimum:
        noun = "an integer" if kind is int else "a number"
        raise ConfigError(flag, f"must be {noun} >= {minimum}, got {value!r}")


def validate_config(config: RunConfig) -> RunConfig:
    """Check every field; return the config unchanged or raise :class:`ConfigError`.

    Examples
    --------
    >>> validate_config(RunConfig(strategy="one-device")).strategy
    'one-device'
    >>> try:
    ...     validate_config(RunConfig(optimizer="rmsprop"))
    ... except ConfigError as error:
    ...     print(error.field)
    --optimizer
    """
    from workbench.parallel.registry import STRATEGY_NAMES, device_count_rule

    _choice("--strategy", config.strategy, STRATEGY_NAMES, "strategy")
    _at_least("--devices", config.devices, 1)
    _choice("--model", config.model, MODEL_NAMES, "model")
    if not config.hidden or any(
        isinstance(h, bool) or not isinstance(h, int) or h < 1 for h in config.hidden
    ):
        raise ConfigError(
            "--hidden", f"needs positive layer widths like 512,512, got {config.hidden}"
        )
    try:
        kind, argument = parse_dataset_spec(config.dataset)
    except DatasetError as error:
        raise ConfigError("--dataset", f"{error} (forms: {', '.join(DATASET_FORMS)})") from None
    if kind in ("mnist", "fashion-mnist", "cifar10") and not Path(argument).expanduser().is_dir():
        raise ConfigError("--dataset", f"{kind} directory {argument} does not exist")
    if config.epochs is not None and config.steps is not None:
        raise ConfigError("--epochs", "give either --epochs or --steps, not both")
    if config.epochs is not None:
        _at_least("--epochs", config.epochs, 1)
    if config.steps is not None:
        _at_least("--steps", config.steps, 1)
    _at_least("--batch-size", config.batch_size, 1)
    if config.lr is not None and (
        isinstance(config.lr, bool) or not isinstance(config.lr, int | float) or not config.lr > 0
    ):
        raise ConfigError("--lr", f"must be a number > 0, got {config.lr!r}")
    _choice("--optimizer", config.optimizer, OPTIMIZER_NAMES, "optimizer")
    _at_least("--seed", config.seed, 0)
    _choice("--dtype", config.dtype, DTYPE_NAMES, "dtype")
    _choice("--allreduce", config.allreduce, ALLREDUCE_NAMES, "all-reduce algorithm")
    _at_least("--ps", config.ps, 1)
    _choice("--mode", config.mode, MODE_NAMES, "mode")
    if config.staleness is not None:
        _at_least("--staleness", config.staleness, 0)
        if config.mode != "async":
            raise ConfigError("--staleness", "bounds async updates; add --mode async")

    _choice("--replication", config.replication, REPLICATION_NAMES, "replication")
    _at_least("--stages", config.stages, 1)
    _at_least("--microbatches", config.microbatches, 1)
    _choice("--schedule", config.schedule, SCHEDULE_NAMES, "schedule")
    _choice("--device-type", config.device_type, DEVICE_TYPE_NAMES, "device type")
    _at_least("--warmup-steps", config.warmup_steps, 0)
    _choice("--lr-scaling", config.lr_scaling, SCALING_RULES, "scaling rule")
    _choice("--lr-decay", config.lr_decay, DECAY_RULES, "decay rule")
    _at_least("--hosts", config.hosts, 1)
    _at_least("--bucket-mb", config.bucket_mb, 0.001, kind=int | float)
    _choice("--compression", config.compression, COMPRESSION_NAMES, "compression")
    if config.compression != "none" and config.strategy not in (
        "mirrored",
        "multi-worker-mirrored",
    ):
        raise ConfigError("--compression", "applies to mirrored and multi-worker-mirrored")
    _at_least("--stall-timeout", config.stall_timeout, 0.1, kind=int | float)
    # After the single-field checks: the strategy's rules divide by stages and micro-batches.
    device_count_rule(config.strategy)(config)
    _check_checkpoint_paths(config)
    return config


def _check_checkpoint_paths(config: RunConfig) -> None:
    if config.save is not None:
        target = Path(config.save).expanduser()
        if target.exists() and not target.is_dir():
            raise ConfigError("--save", f"{target} exists and is not a directory")
        if target.is_dir() and any(target.iterdir()) and not (target / "manifest.json").exists():
            raise ConfigError(
                "--save",
                f"{target} holds other files; choose an empty or new directory, "
                "or an earlier checkpoint to overwrite",
            )
        parent = target.parent if not target.exists() else target
        while not parent.exists():
            parent = parent.parent
        if not os.access(parent, os.W_OK):
            raise ConfigError("--save", f"{parent} is not writable")
    if config.resume is not None:
        source = Path(config.resume).expanduser()
        if not (source / "manifest.json").is_file():
            raise ConfigError("--resume", f"{source} is not a checkpoint (no manifest.json)")


def total_steps(config: RunConfig, steps_per_epoch: int) -> int:
    if config.steps is not None:
        return config.steps
    return (config.epochs or DEFAULT_EPOCHS) * steps_per_epoch
