"""The ``dtrain`` command line and the flag parser it shares with ``%dtrain``.

The parser is imported when first used, so ``dtrain --help`` and ``dtrain --version`` answer
without it.
"""

from __future__ import annotations

from typing import Any

from workbench.cli.main import main

__all__ = ["FlagError", "build_parser", "main", "parse_run_flags"]


def __getattr__(name: str) -> Any:
    if name in ("FlagError", "build_parser", "parse_run_flags"):
        from workbench.launch import flags

        return getattr(flags, name)
    raise AttributeError(f"module 'workbench.cli' has no attribute {name!r}")
