"""``dtrain bench``: the benchmark suites, which ship with the source repository and not with
the installed package (docs/benchmarks.md).

From a source checkout (the repository's ``benchmarks`` package beside this ``workbench``
package) it runs ``python -m benchmarks`` with the same arguments; from an installed wheel it
says where the suites are and exits 2. The package is imported by name at run time, so no layer
of ``workbench`` depends on it.
"""

from __future__ import annotations

import importlib
import sys
from importlib.util import find_spec
from pathlib import Path

NOT_SHIPPED = (
    "dtrain bench: error: the benchmark suites ship with the source repository, not with the "
    "installed package; from a checkout of it, run 'python -m benchmarks --list' at its root "
    "(docs/benchmarks.md)"
)


def checkout_root() -> Path | None:
    """The repository root when the ``benchmarks`` package found on the path sits beside this
    ``workbench`` package (a source checkout), else None (an installed wheel, or some other
    package of that name)."""
    here = Path(__file__).resolve().parents[2]  # workbench/cli/bench_command.py
    try:
        spec = find_spec("benchmarks")
    except (ImportError, ValueError):
        return None
    if spec is None or spec.origin is None:
        return None
    return here if Path(spec.origin).resolve().parent.parent == here else None


def bench_command(argv: list[str]) -> int:
    """Entry point of ``dtrain bench ARGS``; returns the exit status (``python -m
    benchmarks``'s, or 2 where the suites are not there)."""
    if checkout_root() is None:
        print(NOT_SHIPPED, file=sys.stderr)
        return 2
    command = importlib.import_module("benchmarks.command")
    status: int = command.bench_command(argv, prog="dtrain bench")
    return status
