"""Which runs ``--accumulate K`` fits, checked before anything starts.

Gradient accumulation gives every data-parallel strategy K micro-steps per step, one exchange
and one update (docs/guide/command-line.md, "Gradient accumulation"): one-device, mirrored,
central storage, multi-worker mirrored, sharded and parameter servers (sync, and async, where a
worker accumulates K micro-steps before each push). The global batch stays what ``--batch-size``
says, so N replicas and K micro-steps need a batch that N x K divides. Pipelines and hybrid
meshes already split their batch into micro-batches (``--microbatches`` is their accumulation),
and model parallelism has one batch on every device: they refuse K > 1. In-graph replication
accumulates for mirrored (a tower per micro-step, their gradients summed before the
all-reduce); central storage's and the parameter servers' in-graph towers would each push to
the storage, K exchanges a step, so they refuse it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workbench.config import ConfigError, RunConfig

if TYPE_CHECKING:  # the definitions import the engine, which the flag parser must not wait for
    from workbench.strategies.definition import StrategyDefinition

# The data-parallel strategies whose replicas accumulate (and strategies derived from them).
ACCUMULATING = (
    "one-device",
    "mirrored",
    "central-storage",
    "multi-worker-mirrored",
    "sharded",
    "parameter-server",
)


def accumulates(definition: StrategyDefinition) -> bool:
    """Whether ``definition``'s steps take ``--accumulate`` (its own or a parent's name)."""
    return any(
        getattr(cls, "name", None) in ACCUMULATING
        for cls in type(definition).__mro__
        if "name" in vars(cls)
    )


def micro_batch_size(config: RunConfig) -> int:
    """The rows each micro-step of a replica computes: the global batch over the replicas
    (``--devices``; one for one-device) and the micro-steps."""
    return config.batch_size // config.devices // config.accumulate


def check_accumulation(definition: StrategyDefinition, config: RunConfig) -> None:
    """Refuse ``--accumulate K`` (K > 1) where the strategy cannot accumulate, or where the
    global batch does not split into N replicas x K equal micro-steps.

    Examples
    --------
    >>> from workbench.strategies.registry import STRATEGIES
    >>> config = RunConfig(strategy="mirrored", devices=2, batch_size=30, accumulate=4)
    >>> try:
    ...     check_accumulation(STRATEGIES["mirrored"], config)
    ... except ConfigError as error:
    ...     print(error)  # doctest: +NORMALIZE_WHITESPACE
    --accumulate: 4 micro-steps on each of 2 replicas need a --batch-size that 8 divides;
    30 does not (try 24 or 32)
    """
    steps = config.accumulate
    if steps == 1:
        return
    if "microbatches" in config.options:
        raise ConfigError(
            "--accumulate",
            f"strategy {config.strategy} already splits each step's batch into micro-batches "
            "whose gradients it sums before one update: use --microbatches instead",
        )
    if not accumulates(definition):
        raise ConfigError(
            "--accumulate",
            f"applies to {', '.join(ACCUMULATING)}; strategy {config.strategy} computes each "
            "step's batch in one piece on every device",
        )
    # In-graph, only mirrored towers meet in an all-reduce after summing on their device.
    pushes = getattr(definition, "central_storage", True)
    if config.options.get("replication") == "in-graph" and pushes:
        raise ConfigError(
            "--accumulate",
            f"with --replication in-graph applies to mirrored; {config.strategy}'s towers "
            "would each push to the storage, one exchange per micro-step: use between-graph",
        )
    parts = config.devices * steps
    if config.batch_size % parts:
        below = config.batch_size - config.batch_size % parts
        tries = " or ".join(str(size) for size in (below, below + parts) if size)
        replicas = f"each of {config.devices} replicas" if config.devices > 1 else "one device"
        raise ConfigError(
            "--accumulate",
            f"{steps} micro-steps on {replicas} need a --batch-size that {parts} divides; "
            f"{config.batch_size} does not (try {tries})",
        )


def accumulation_summary(config: RunConfig) -> dict[str, int]:
    """What the ``--json`` summary says of accumulation: the micro-steps per step and the rows
    each computes on a replica (the replica's whole share when K is 1)."""
    return {"accumulate": config.accumulate, "micro_batch_size": micro_batch_size(config)}


def describe_accumulation(config: RunConfig) -> str:
    """The run's start line's words for accumulation (nothing when K is 1).

    Examples
    --------
    >>> describe_accumulation(RunConfig(strategy="mirrored", devices=2, accumulate=2))
    ' in 2 micro-steps of 8 rows per device'
    """
    if config.accumulate == 1:
        return ""
    return f" in {config.accumulate} micro-steps of {micro_batch_size(config)} rows per device"
