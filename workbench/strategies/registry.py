"""The one explicit registry of strategies: one line per strategy, in ``--help`` order.

Everything that lists strategies or their options reads it: the flag parser, validation, the
notebook form, the Python API classes. A definition registered later (a plug-in, a test's toy
strategy) appears in all of them at once.
"""

from __future__ import annotations

from collections.abc import Iterator

from workbench.config import ConfigError, Option
from workbench.strategies.central_storage import CentralStorage
from workbench.strategies.definition import StrategyDefinition
from workbench.strategies.hybrid import Hybrid
from workbench.strategies.mirrored import Mirrored
from workbench.strategies.model_parallel import ModelParallel
from workbench.strategies.multi_worker_mirrored import MultiWorkerMirrored
from workbench.strategies.one_device import OneDevice
from workbench.strategies.parameter_server import ParameterServer
from workbench.strategies.pipeline import Pipeline


class StrategyRegistry:
    """Strategy definitions by name (what ``--strategy`` takes)."""

    def __init__(self) -> None:
        self._definitions: dict[str, StrategyDefinition] = {}

    def register(self, definition: StrategyDefinition) -> StrategyDefinition:
        if "name" not in vars(type(definition)):
            raise TypeError(f"{type(definition).__name__} declares no strategy name")
        if definition.name in self._definitions:
            raise ValueError(f"strategy {definition.name!r} is already registered")
        clashes = {
            option.name
            for option in definition.options
            if option.name in self.options() and self.options()[option.name] != option
        }
        if clashes:
            raise ValueError(
                f"strategy {definition.name!r} declares {', '.join(sorted(clashes))} "
                "unlike the strategies that already take it; share their Option rows"
            )
        self._definitions[definition.name] = definition
        return definition

    def unregister(self, name: str) -> None:
        del self._definitions[name]

    def names(self) -> tuple[str, ...]:
        return tuple(self._definitions)

    def __iter__(self) -> Iterator[StrategyDefinition]:
        return iter(tuple(self._definitions.values()))

    def __getitem__(self, name: str) -> StrategyDefinition:
        """The definition of ``name``, or a :class:`ConfigError` naming ``--strategy``."""
        try:
            return self._definitions[name]
        except (KeyError, TypeError):
            raise ConfigError(
                "--strategy",
                f"unknown strategy {name!r}; choose one of: {', '.join(self.names())}",
            ) from None

    def options(self) -> dict[str, Option]:
        """Every strategy option, by name, in the order the strategies declare them."""
        return {o.name: o for d in self._definitions.values() for o in d.options}

    def takers(self, option: str) -> tuple[str, ...]:
        """The strategies that accept ``option``."""
        return tuple(d.name for d in self if any(o.name == option for o in d.options))


STRATEGIES = StrategyRegistry()
STRATEGIES.register(OneDevice())
STRATEGIES.register(Mirrored())
STRATEGIES.register(CentralStorage())
STRATEGIES.register(MultiWorkerMirrored())
STRATEGIES.register(ParameterServer())
STRATEGIES.register(Pipeline())
STRATEGIES.register(Hybrid())
STRATEGIES.register(ModelParallel())
