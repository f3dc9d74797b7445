"""Strategies as users pick them: one module per strategy declaring its name, options, rules,
plan and summary fields (a :class:`StrategyDefinition`), and one registry line each.

What flows in: a validated :class:`~workbench.config.RunConfig` and a
:class:`~workbench.training.job.TrainingJob`. What flows out: the trained variables and,
through the event log, what every device did. Every synchronous strategy must end with the
parameters ``one-device`` ends with. The strategies drive the device-side code in
``workbench.parallel``; the flags, the form and the Python API are derived from the
definitions (``docs/architecture/extending.md``, "Adding a strategy").

The registry and validation import neither the definitions nor the device side; the
definitions (and ``ClusterStrategy``, ``StrategyDefinition`` here) are imported on first use.
"""

from __future__ import annotations

from typing import Any

from workbench.strategies.registry import STRATEGIES, StrategyRegistry
from workbench.strategies.validation import validate_config

__all__ = [
    "STRATEGIES",
    "ClusterStrategy",
    "StrategyDefinition",
    "StrategyRegistry",
    "replicas_divide_the_batch",
    "validate_config",
]


def __getattr__(name: str) -> Any:
    if name == "ClusterStrategy":
        from workbench.strategies.cluster_strategy import ClusterStrategy

        return ClusterStrategy
    if name in ("StrategyDefinition", "replicas_divide_the_batch"):
        from workbench.strategies import definition

        return getattr(definition, name)
    raise AttributeError(f"module 'workbench.strategies' has no attribute {name!r}")
