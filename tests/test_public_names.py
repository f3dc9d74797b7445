"""A public name means one thing in the core packages: a function or class is defined under
its name in one module only, so an import never brings in the namesake of another layer (the
cluster simulator and a pipeline schedule's player, a simulated ring and the real one)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections import defaultdict

# The packages below the strategies whose names readers meet side by side.
CORE = ("ir", "passes", "costs", "simulate", "parallel", "optim")


def _core_modules() -> list[str]:
    names = []
    for package in CORE:
        module = importlib.import_module(f"workbench.{package}")
        names.append(module.__name__)
        if hasattr(module, "__path__"):
            found = pkgutil.walk_packages(module.__path__, f"{module.__name__}.")
            names += [info.name for info in found]
    # A private module's names (``ir/ops/_common.py``) are its package's, not public.
    return [name for name in names if not any(part.startswith("_") for part in name.split("."))]


def test_no_public_function_or_class_is_defined_in_two_core_modules():
    defined_in: dict[str, set[str]] = defaultdict(set)
    for name in _core_modules():
        module = importlib.import_module(name)
        for attribute, value in vars(module).items():
            kind = inspect.isfunction(value) or inspect.isclass(value)
            # Defined here, not imported from another module.
            if kind and not attribute.startswith("_") and value.__module__ == name:
                defined_in[attribute].add(name)
    twice = {attribute: sorted(where) for attribute, where in defined_in.items() if len(where) > 1}
    assert twice == {}


def test_the_pass_modules_are_not_named_after_pipelines_or_schedules():
    """``pipeline`` is pipeline parallelism and ``schedule`` a pipeline's or the learning
    rate's; the passes' runner and their list schedule say what they are."""
    passes = importlib.import_module("workbench.passes")
    modules = {info.name for info in pkgutil.iter_modules(passes.__path__)}
    assert modules.isdisjoint({"pipeline", "schedule", "schedules"})
    assert {"pass_runner", "list_schedule"} <= modules
