"""The one explicit registry of strategies: one line per strategy, in ``--help`` order.

Everything that lists strategies or their options reads it: the flag parser, validation, the
notebook form, the Python API classes. A definition registered later (a plug-in, a test's toy
strategy) appears in all of them at once.

A built-in strategy's line names its module and its option rows, and its module is imported
the first time its definition is asked for: the names and options (all ``--help``, the flag
parser and a typo's message need) come without the engine, Dask or the device side. The
definition, once imported, must declare the same name and options as its line.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from workbench.config import ConfigError, Option, unknown_value
from workbench.strategies.options import (
    ALLREDUCE,
    BACKUP_WORKERS,
    BUCKET_MB,
    COMPRESSION,
    ELASTIC,
    HOSTS,
    MESH,
    MICROBATCHES,
    MODE,
    PLACEMENT,
    PS,
    PS_PARTITION_MIN_BYTES,
    REPLICATION,
    SCHEDULE,
    STAGES,
    STALENESS,
    TP,
    VIRTUAL_STAGES,
    ZERO_STAGE,
)

if TYPE_CHECKING:
    from workbench.strategies.definition import StrategyDefinition


@dataclass
class _Entry:
    """A registered strategy: its name and options, and its definition once imported."""

    name: str
    options: tuple[Option, ...]
    source: str  # "module:Class", imported on first use
    definition: StrategyDefinition | None = None

    def load(self) -> StrategyDefinition:
        if self.definition is None:
            module, _, class_name = self.source.partition(":")
            definition = getattr(importlib.import_module(module), class_name)()
            if definition.name != self.name or tuple(definition.options) != self.options:
                raise TypeError(
                    f"{self.source} declares strategy {definition.name!r} with options "
                    f"{[o.name for o in definition.options]}, unlike its registry line "
                    f"({self.name!r}, {[o.name for o in self.options]})"
                )
            self.definition = definition
        return self.definition


class StrategyRegistry:
    """Strategy definitions by name (what ``--strategy`` takes)."""

    def __init__(self) -> None:
        self._entries: dict[str, _Entry] = {}

    def register(self, definition: StrategyDefinition) -> StrategyDefinition:
        if "name" not in vars(type(definition)):
            raise TypeError(f"{type(definition).__name__} declares no strategy name")
        source = f"{type(definition).__module__}:{type(definition).__qualname__}"
        self._add(_Entry(definition.name, tuple(definition.options), source, definition))
        return definition

    def declare(self, name: str, source: str, options: tuple[Option, ...] = ()) -> None:
        """Register the strategy ``name`` whose definition is the class ``source``
        (``"module:Class"``), imported when first asked for."""
        self._add(_Entry(name, tuple(options), source))

    def _add(self, entry: _Entry) -> None:
        if entry.name in self._entries:
            raise ValueError(f"strategy {entry.name!r} is already registered")
        known = self.options()
        clashes = {o.name for o in entry.options if o.name in known and known[o.name] != o}
        if clashes:
            raise ValueError(
                f"strategy {entry.name!r} declares {', '.join(sorted(clashes))} "
                "unlike the strategies that already take it; share their Option rows"
            )
        self._entries[entry.name] = entry

    def unregister(self, name: str) -> None:
        del self._entries[name]

    def names(self) -> tuple[str, ...]:
        return tuple(self._entries)

    def __iter__(self) -> Iterator[StrategyDefinition]:
        return iter(tuple(entry.load() for entry in tuple(self._entries.values())))

    def __getitem__(self, name: str) -> StrategyDefinition:
        """The definition of ``name``, or a :class:`ConfigError` naming ``--strategy``."""
        return self._entry(name).load()

    def declared_options(self, name: str) -> tuple[Option, ...]:
        """The options strategy ``name`` takes (without importing its definition), or a
        :class:`ConfigError` naming ``--strategy``."""
        return self._entry(name).options

    def _entry(self, name: str) -> _Entry:
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            raise ConfigError("--strategy", unknown_value("strategy", name, self.names())) from None

    def options(self) -> dict[str, Option]:
        """Every strategy option, by name, in the order the strategies declare them."""
        return {o.name: o for entry in self._entries.values() for o in entry.options}

    def takers(self, option: str) -> tuple[str, ...]:
        """The strategies that accept ``option``."""
        return tuple(
            entry.name
            for entry in self._entries.values()
            if any(o.name == option for o in entry.options)
        )


STRATEGIES = StrategyRegistry()
_HERE = "workbench.strategies"
STRATEGIES.declare("one-device", f"{_HERE}.one_device:OneDevice")
STRATEGIES.declare(
    "mirrored",
    f"{_HERE}.mirrored:Mirrored",
    (ALLREDUCE, BUCKET_MB, COMPRESSION, ELASTIC, REPLICATION),
)
STRATEGIES.declare("sharded", f"{_HERE}.sharded:Sharded", (ZERO_STAGE, BUCKET_MB))
STRATEGIES.declare(
    "central-storage",
    f"{_HERE}.central_storage:CentralStorage",
    (BUCKET_MB, COMPRESSION, REPLICATION),
)
STRATEGIES.declare(
    "multi-worker-mirrored",
    f"{_HERE}.multi_worker_mirrored:MultiWorkerMirrored",
    (HOSTS, BUCKET_MB, COMPRESSION, ELASTIC),
)
STRATEGIES.declare(
    "parameter-server",
    f"{_HERE}.parameter_server:ParameterServer",
    (PS, MODE, STALENESS, REPLICATION, BACKUP_WORKERS, PS_PARTITION_MIN_BYTES, COMPRESSION),
)
STRATEGIES.declare(
    "pipeline", f"{_HERE}.pipeline:Pipeline", (STAGES, MICROBATCHES, SCHEDULE, VIRTUAL_STAGES)
)
STRATEGIES.declare(
    "hybrid",
    f"{_HERE}.hybrid:Hybrid",
    (STAGES, MICROBATCHES, SCHEDULE, VIRTUAL_STAGES, COMPRESSION),
)
STRATEGIES.declare("model-parallel", f"{_HERE}.model_parallel:ModelParallel", (PLACEMENT,))
STRATEGIES.declare("tensor-parallel", f"{_HERE}.tensor_parallel:TensorParallel", (TP,))
STRATEGIES.declare("mesh", f"{_HERE}.mesh:Mesh", (MESH, MICROBATCHES, SCHEDULE, VIRTUAL_STAGES))
