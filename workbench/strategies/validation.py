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
)
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
    definition = STRATEGIES[config.strategy]
    check_run_options(config)
    known, declared = STRATEGIES.options(), {o.name: o for o in definition.options}
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
            f"{', '.join(o.flag for o in definition.options) or 'none'})",
        )
    options = {name: config.options.get(name, o.default) for name, o in declared.items()}
    for name, value in options.items():
        declared[name].check(value)
    config = config.replace(options=options)
    # After the single-option checks: device rules divide by stages and micro-batches.
    definition.check_config(config)
    check_checkpoint_paths(config)
    return config
