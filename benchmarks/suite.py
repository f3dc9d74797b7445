"""The shape every suite has, and the two ways a suite can end early.

A suite is a module ``benchmarks/NAME_suite.py`` with three functions:

- ``add_flags(parser)`` declares the flags the suite reads, and only those (``python -m
  benchmarks NAME --help`` lists them);
- ``run(args, progress)`` turns the parsed flags into a JSON-ready result, reporting progress
  lines as it goes;
- ``render(result)`` turns that result into Markdown (the shared pieces are in
  :mod:`benchmarks.report`).

The command (:mod:`benchmarks.command`) imports a suite's module only when that suite is asked
for, so a suite's peers (PyTorch, CuPy, root-only tools) cost nothing to the others.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, Protocol

Progress = Callable[[str], None]
Result = dict[str, Any]


class Suite(Protocol):
    """What :mod:`benchmarks.command` calls on a suite's module."""

    def add_flags(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace, progress: Progress) -> Result: ...

    def render(self, result: Result) -> str: ...


class SettingsError(ValueError):
    """Flags that parse but cannot measure what the suite reports (a kill after the last step,
    say): the command exits 2, as for a bad flag."""


class SuiteUnavailable(RuntimeError):
    """This machine cannot run the suite (not root, no iproute2): the command exits 2, naming
    what is missing, as for a missing device."""


class SuiteFailed(RuntimeError):
    """The suite ran but its figures would mean nothing (the contenders disagree, a fault was
    not injected): the command exits 1."""
