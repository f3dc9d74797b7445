"""The Python API in ``tf.distribute``'s shape: pick a strategy, build the model in its scope,
call ``fit``.

    strategy = workbench.MirroredStrategy(devices=2, allreduce="ring")
    with strategy.scope():
        model = workbench.Sequential([workbench.Flatten(), workbench.Dense(10)],
                                     input_shape=(1, 8, 8))
    result = model.fit(dataset="digits", epochs=2, batch_size=64)

There is one class per registered strategy (``workbench.MirroredStrategy``,
``workbench.ParameterServerStrategy``, ...), made from its definition: its constructor takes
the placement options every distributed run has (``devices``, ``device_type``, ``cluster``,
``stall_timeout``) and the strategy's own options; ``fit`` takes the rest. Everything is checked
by the same :func:`~workbench.strategies.validate_config` as the command line and ``%dtrain``,
and ``%dtrain`` starts its runs through :func:`start` here. As in TensorFlow, the global batch
is the per-replica batch times the replicas: ``batch_size`` is global.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from workbench.config import ConfigError, RunConfig
from workbench.launch.background_run import BackgroundRun
from workbench.launch.runner import RunResult, run_training
from workbench.models.strategy_scope import current_strategy, register_fit, strategy_scope
from workbench.strategies import STRATEGIES, StrategyDefinition, validate_config

# Options of the run's placement, which every strategy class takes (the strategy's device
# rule refuses what does not fit it, e.g. one-device with devices=2).
PLACEMENT_OPTIONS = ("devices", "device_type", "cluster", "stall_timeout")


class Strategy:
    """A parallel strategy and its options; subclasses are made per registered strategy
    (``strategy`` is the ``--strategy`` name, ``options`` the keywords it takes)."""

    strategy = "one-device"
    options: tuple[str, ...] = ()

    def __init__(self, **options: Any) -> None:
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            allowed = ", ".join(self.options) or "none"
            raise ConfigError(
                unknown[0], f"is not an option of {type(self).__name__} (options: {allowed})"
            )
        self.settings = {"strategy": self.strategy, **options}

    def scope(self) -> Iterator[Strategy]:
        """Models built inside train with this strategy when their ``fit`` is called."""
        return strategy_scope(self)

    def config(self, **fit_options: Any) -> RunConfig:
        """The run this strategy and ``fit_options`` describe (checked)."""
        fields = set(RunConfig().to_dict()) - {"strategy", "json"}
        for name in fit_options:
            if name not in fields:
                allowed = ", ".join(sorted(fields))
                raise ConfigError(name, f"is not a fit option (options: {allowed})")
            if name in self.settings:
                raise ConfigError(name, f"is set by {type(self).__name__}; give it there only")
        options = {**self.settings, **fit_options}
        if "hidden" in options:
            options["hidden"] = tuple(options["hidden"])
        return validate_config(RunConfig(**options))

    def fit(self, model=None, background: bool = False, **fit_options: Any):
        """Train ``model`` (a ``Sequential``; None: the ``model`` preset option). Returns the
        :class:`~workbench.launch.runner.RunResult`, or with ``background=True`` a
        :class:`~workbench.launch.background_run.BackgroundRun` at once."""
        return start(self.config(**fit_options), model, background=background)

    def __repr__(self) -> str:
        options = ", ".join(f"{k}={v!r}" for k, v in self.settings.items() if k != "strategy")
        return f"{type(self).__name__}({options})"


def api_class(definition: StrategyDefinition) -> type[Strategy]:
    """The ``tf.distribute``-style class of a strategy definition."""
    own = tuple(option.name for option in definition.options)
    lines = [f"``{definition.name}``: {definition.description}."]
    if own:
        described = "; ".join(f"``{o.name}``: {o.describe()}" for o in definition.options)
        lines.append(f"Options: {described}.")
    return type(
        definition.api_name,
        (Strategy,),
        {
            "strategy": definition.name,
            "options": PLACEMENT_OPTIONS + own,
            "__doc__": "\n\n".join(lines),
            "__module__": __name__,
        },
    )


_classes: dict[str, type[Strategy]] = {}


def strategy_classes() -> dict[str, type[Strategy]]:
    """The API class of every registered strategy, by class name (``MirroredStrategy``);
    made once per definition, so a strategy registered later gets one too."""
    for definition in STRATEGIES:
        if definition.api_name not in _classes or (
            _classes[definition.api_name].strategy != definition.name
        ):
            _classes[definition.api_name] = api_class(definition)
    names = {definition.api_name for definition in STRATEGIES}
    return {name: cls for name, cls in _classes.items() if name in names}


def __getattr__(name: str) -> type[Strategy]:
    classes = strategy_classes()
    if name in classes:
        return classes[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def start(
    config: RunConfig, model=None, background: bool = True, progress=None, panel: bool = False
):
    """Start a checked run: in a background thread (a ``BackgroundRun``) or here. With
    ``panel``, the run's live panel is built before training starts (it is costly to build,
    and would otherwise compete with the run's first seconds); the panel is the notebook's, so
    only a caller that has it (``%dtrain``) passes it, as ``panel``."""
    if background:
        run = BackgroundRun(config, model=model, progress=progress, begin=False)
        if panel:
            run.panel()
        return run.begin()
    return run_training(config, model=model, progress=progress or (lambda line: None))


def _fit(strategy: Strategy | None, model, background: bool, **options: Any) -> RunResult:
    """How ``Sequential.fit`` trains: with the strategy it was built under, or one device."""
    if strategy is None:
        strategy = strategy_classes()[STRATEGIES["one-device"].api_name]()
    return strategy.fit(model, background=background, **options)


register_fit(_fit)

__all__ = ["PLACEMENT_OPTIONS", "Strategy", "api_class", "current_strategy", "start"]
