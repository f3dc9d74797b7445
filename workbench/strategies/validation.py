"""The one validation of a whole run configuration, for the command line, ``%dtrain``, the
notebook form and the Python API alike: the run options, then the strategy's options (each
accepted only by the strategies that declare it, defaults filled in), then the strategy's
device rule, then the checkpoint paths. Nothing is loaded or started here.
"""

from __future__ import annotations

from workbench.config import (
    ConfigError,
    RunConfig,
    check_checkpoint_paths,
    check_run_options,
    flag_of,
    overflow_steps,
    straggler_pairs,
)
from workbench.parallel.collectives.compression import CompressionError, parse_compression
from workbench.runtime.devices import names_device, short_device_name
from workbench.strategies.registry import STRATEGIES


def validate_config(config: RunConfig) -> RunConfig:
    """Check every option; return the config with the strategy's defaults filled in, or raise
    :class:`~workbench.config.ConfigError` naming the flag.

    Examples
    --------
    >>> validate_config(RunConfig(strategy="mirrored", devices=2)).allreduce
    'auto'
    >>> try:
    ...     validate_config(RunConfig(optimizer="rmsprop"))
    ... except ConfigError as error:
    ...     print(error.field)
    --optimizer
    >>> try:
    ...     validate_config(RunConfig(strategy="pipeline", devices=2, allreduce="ring"))
    ... except ConfigError as error:
    ...     print(error)
    --allreduce: applies to mirrored; strategy pipeline does not take it
    """
    # The options before the definition: a mistyped value is refused without importing it.
    rows = STRATEGIES.declared_options(config.strategy)
    check_run_options(config)
    known, declared = STRATEGIES.options(), {o.name: o for o in rows}
    for name in config.options:
        if name in declared:
            continue
        if name in known:
            known[name].check(config.options[name])  # a bad value is named first, as such
            needs = known[name].applies_with
            raise ConfigError(
                flag_of(name),
                f"applies to {', '.join(STRATEGIES.takers(name))}"
                f"{f' with {needs}' if needs else ''}; strategy {config.strategy} does not take it",
            )
        raise ConfigError(
            flag_of(name),
            f"is not an option of any strategy (strategy {config.strategy} takes: "
            f"{', '.join(o.flag for o in rows) or 'none'})",
        )
    options = {name: config.options.get(name, o.default) for name, o in declared.items()}
    for name, value in options.items():
        declared[name].check(value)
    config = _checked_compression(config.replace(options=options))
    # After the single-option checks: device rules divide by stages and micro-batches.
    definition = STRATEGIES[config.strategy]
    definition.check_config(config)
    config = config.replace(simulate_straggler=_stragglers_of(definition, config))
    check_checkpoint_paths(config)
    return config


def _checked_compression(config: RunConfig) -> RunConfig:
    """``--compression`` in its canonical form (a malformed or out-of-range value refused,
    naming the forms), and ``--simulate-overflow`` only where a loss scaler can skip it."""
    compression = "none"
    if "compression" in config.options:
        try:
            spec = parse_compression(config.options["compression"])
        except CompressionError as error:
            raise ConfigError("--compression", str(error)) from None
        compression = spec.text
        config = config.replace(compression=compression)
    steps = overflow_steps(config.simulate_overflow)
    if steps and compression not in ("fp16", "bf16"):
        taking = (
            "" if "compression" in config.options else f" (strategy {config.strategy} has none)"
        )
        raise ConfigError(
            "--simulate-overflow",
            "needs --compression fp16 or bf16, whose dynamic loss scaler skips the step; "
            f"this run's compression is {compression}{taking}",
        )
    return config.replace(simulate_overflow=steps)


def _stragglers_of(definition, config: RunConfig) -> tuple[tuple[str, float], ...]:
    """``--simulate-straggler`` as pairs, each naming a device this run has."""
    pairs = straggler_pairs(config.simulate_straggler)
    devices = definition.device_names(config, "cpu")
    for pattern, _ in pairs:
        if not any(names_device(pattern, device) for device in devices):
            raise ConfigError(
                "--simulate-straggler",
                f"no device {pattern!r} in this {config.strategy} run; its devices: "
                f"{', '.join(short_device_name(device) for device in devices)}",
            )
    return pairs
