"""Which runs ``--precision mixed-fp16|mixed-bf16`` fits, checked before anything starts.

Mixed precision (docs/guide/command-line.md, "Mixed precision") keeps float32 master weights,
so it refuses ``--dtype float64``. It runs where a step's gradients come from the shared
gradient graph and are tested for overflow before one float32 update on every replica alike:
one-device and the between-graph data-parallel strategies (and strategies derived from them),
sharded ones included (float32 master shards; every rank agrees on a skip).
Pipelines, hybrid meshes and model parallelism split the step across devices, parameter
servers update shards that no one step tests as a whole, and in-graph replication builds one
client graph: they refuse it, naming the strategies that take it. On GPUs, bfloat16 needs a
CuPy that has it (:func:`check_precision_on_device`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workbench.config import ConfigError, RunConfig
from workbench.runtime.device_probe import bfloat16_obstacle
from workbench.runtime.gpu_runtime import gpu_runtime

if TYPE_CHECKING:  # the definitions import the engine, which the flag parser must not wait for
    from workbench.strategies.definition import StrategyDefinition

MIXED_PRECISION = ("one-device", "mirrored", "central-storage", "multi-worker-mirrored", "sharded")


def takes_mixed_precision(definition: StrategyDefinition) -> bool:
    """Whether ``definition``'s steps take ``--precision mixed-*`` (its own or a parent's)."""
    return any(
        getattr(cls, "name", None) in MIXED_PRECISION
        for cls in type(definition).__mro__
        if "name" in vars(cls)
    )


def check_precision(definition: StrategyDefinition, config: RunConfig) -> None:
    """Refuse ``--precision mixed-*`` with ``--dtype float64`` or where the strategy cannot
    take it, naming ``--precision``.

    Examples
    --------
    >>> from workbench.strategies.registry import STRATEGIES
    >>> config = RunConfig(precision="mixed-bf16", dtype="float64")
    >>> try:
    ...     check_precision(STRATEGIES["one-device"], config)
    ... except ConfigError as error:
    ...     print(error)  # doctest: +NORMALIZE_WHITESPACE
    --precision: mixed-bf16 keeps float32 master weights and computes in bfloat16; it needs
    --dtype float32, not float64
    """
    if config.precision == "fp32":
        return
    half = "float16" if config.precision == "mixed-fp16" else "bfloat16"
    if config.dtype != "float32":
        raise ConfigError(
            "--precision",
            f"{config.precision} keeps float32 master weights and computes in {half}; it needs "
            f"--dtype float32, not {config.dtype}",
        )
    if not takes_mixed_precision(definition):
        raise ConfigError(
            "--precision",
            f"{config.precision} applies to {', '.join(MIXED_PRECISION)}; strategy "
            f"{config.strategy} does not take it (use fp32)",
        )
    if config.options.get("replication") == "in-graph":
        raise ConfigError(
            "--precision",
            f"{config.precision} is for between-graph replication; --replication in-graph "
            "builds one client graph in the run's dtype (use fp32)",
        )


def check_precision_on_device(config: RunConfig, device_type: str) -> None:
    """Refuse ``--precision mixed-bf16`` on GPUs whose CuPy has no bfloat16, before anything
    starts (``device_type``: the run's, as decided on this machine)."""
    if config.precision != "mixed-bf16" or device_type != "gpu":
        return
    runtime = gpu_runtime()
    obstacle = bfloat16_obstacle(runtime.array_module) if runtime is not None else None
    if obstacle is not None:
        raise ConfigError(
            "--precision",
            f"mixed-bf16 on GPUs needs CuPy 14 or later with ml_dtypes installed: {obstacle}; "
            "use --precision mixed-fp16, or --device-type cpu",
        )
