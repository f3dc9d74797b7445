"""One ``tf.distribute``-style class per registered strategy, and the hooks through which
``Sequential.fit``, ``Sequential.compile`` and ``Sequential.get_weights`` reach them (models
sit below this layer: see ``workbench/models/strategy_scope.py``).
"""

from __future__ import annotations

from typing import Any

from workbench.distribute.strategy import Strategy
from workbench.launch.runner import RunResult
from workbench.models.strategy_scope import register_compile, register_fit, register_weights
from workbench.strategies import STRATEGIES, StrategyDefinition

# Options of the run's placement, which every strategy class takes (the strategy's device
# rule refuses what does not fit it, e.g. one-device with devices=2).
PLACEMENT_OPTIONS = ("devices", "device_type", "cluster", "stall_timeout")


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
            # Where pickle finds it again: the package's module __getattr__ makes it.
            "__module__": "workbench.distribute",
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


def one_device_strategy() -> Strategy:
    return strategy_classes()[STRATEGIES["one-device"].api_name]()


def _fit(strategy: Strategy | None, model, background: bool, **options: Any) -> RunResult:
    """How ``Sequential.fit`` trains: with the strategy it was built under, or one device."""
    if strategy is None:
        strategy = one_device_strategy()
    return strategy.fit(model, background=background, **options)


def _compile(strategy: Strategy | None, model, options: dict[str, Any]) -> Strategy:
    """How ``Sequential.compile`` binds a model to a custom loop: its strategy's, or a
    one-device strategy's for a model built outside any scope."""
    if strategy is None:
        strategy = one_device_strategy()
    strategy.compile_model(model, options)
    return strategy


def _weights(strategy: Strategy | None, model) -> dict[str, Any]:
    if strategy is None:
        raise RuntimeError(
            "get_weights: the model's variables live with its custom loop; call "
            "model.compile(...) first (fit returns its variables in its result)"
        )
    return strategy.model_weights(model)


def register_training_hooks() -> None:
    """Make ``Sequential.fit``, ``compile`` and ``get_weights`` reach this layer."""
    register_fit(_fit)
    register_compile(_compile)
    register_weights(_weights)


register_training_hooks()
