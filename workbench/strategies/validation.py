"""The one validation of a whole run configuration, for the command line, ``%dtrain``, the
notebook form and the Python API alike: the run options, then the strategy's options (each
accepted only by the strategies that declare it, defaults filled in), then the strategy's
device rule, then the checkpoint paths. Nothing is loaded or started here.
"""

from __future__ import annotations

from typing import Any

from workbench.config import (
    ConfigError,
    RunConfig,
    check_checkpoint_paths,
    check_run_options,
    did_you_mean,
    flag_of,
    overflow_steps,
    straggler_pairs,
)
from workbench.parallel.collectives.compression import CompressionError, parse_compression
from workbench.runtime.devices import names_device, short_device_name
from workbench.strategies.accumulation import check_accumulation
from workbench.strategies.precision import check_precision
from workbench.strategies.registry import STRATEGIES


def validate_config(config: RunConfig) -> RunConfig:
    """Check every option; return the config with the strategy's defaults filled in and its
    options typed, or raise :class:`~workbench.config.ConfigError` naming the flag.

    Examples
    --------
    >>> from workbench.strategies.options import MirroredOptions
    >>> validate_config(RunConfig(strategy="mirrored", devices=2)).options_of(
    ...     MirroredOptions
    ... ).allreduce
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
    STRATEGIES.declared_options(config.strategy)  # an unknown strategy is named first
    check_run_options(config)
    # The options before the definition: a mistyped value is refused without importing it.
    options = _checked_options(config)
    config = _checked_overflow(config, options)
    # After the single-option checks: device rules divide by stages and micro-batches.
    definition = STRATEGIES[config.strategy]
    typed = definition.options_type(**options)
    config = config.replace(options=options).with_strategy_options(typed)
    definition.check_config(config)
    check_accumulation(definition, config)
    check_precision(definition, config)
    config = config.replace(simulate_straggler=_stragglers_of(definition, config))
    check_checkpoint_paths(config)
    return config


def resolve_options(config: RunConfig) -> RunConfig:
    """``config`` with its strategy's options checked, defaults filled in and typed: the
    options step of :func:`validate_config` alone (no run options, device rule or paths), for
    asking a strategy about a shape before the rest of its run is known.

    Examples
    --------
    >>> from workbench.strategies.options import ParameterServerOptions
    >>> resolve_options(RunConfig(strategy="parameter-server", ps=2)).options_of(
    ...     ParameterServerOptions
    ... ).ps
    2
    """
    options = _checked_options(config)
    typed = STRATEGIES[config.strategy].options_type(**options)
    return config.replace(options=options).with_strategy_options(typed)


def _checked_options(config: RunConfig) -> dict[str, Any]:
    """The strategy's options by name, every one it declares (defaults filled in), each
    value checked and ``--compression`` in its canonical form; an option the strategy does
    not take is refused, naming the strategies that do or, for a typo, every option it has."""
    rows = STRATEGIES.declared_options(config.strategy)
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
        # A typo of one of this strategy's options, else of another strategy's.
        flags = tuple(o.flag for o in rows)
        close = did_you_mean(flag_of(name), flags) or did_you_mean(
            flag_of(name), tuple(o.flag for o in known.values())
        )
        raise ConfigError(
            flag_of(name),
            f"is not an option of any strategy (strategy {config.strategy} takes: "
            f"{', '.join(flags) or 'none'}){close}",
        )
    options = {name: config.options.get(name, o.default) for name, o in declared.items()}
    for name, value in options.items():
        declared[name].check(value)
    if "compression" in options:
        try:
            options["compression"] = parse_compression(options["compression"]).text
        except CompressionError as error:
            raise ConfigError("--compression", str(error)) from None
    return options


def _checked_overflow(config: RunConfig, options: dict[str, Any]) -> RunConfig:
    """``--simulate-overflow`` only where a loss scaler can skip it (``options``: the
    strategy's checked options)."""
    compression = options.get("compression", "none")
    steps = overflow_steps(config.simulate_overflow)
    if steps and compression not in ("fp16", "bf16") and config.precision == "fp32":
        taking = "" if "compression" in options else f" (strategy {config.strategy} has none)"
        raise ConfigError(
            "--simulate-overflow",
            "needs --compression fp16 or bf16, or --precision mixed-fp16 or mixed-bf16, "
            "whose dynamic loss scaler skips the step; "
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
