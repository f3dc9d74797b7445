"""The Markdown every suite's report is made of: tables, ranges, verdicts, and the machine
lines and heading that open a whole report.

A report is meant to be pasted as it is into docs/benchmarks.md, so every suite writes its
tables and verdicts the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any


def row(cells: Iterable[object]) -> str:
    """One table row; an empty cell stays one space wide."""
    return "|" + "|".join(f" {cell} " if str(cell) else " " for cell in cells) + "|"


def table(columns: Sequence[str], align: str, rows: Iterable[Sequence[object]] = ()) -> list[str]:
    """A Markdown table: ``align`` has one letter per column, ``l`` (text) or ``r`` (figures)."""
    rule = "|" + "|".join("---:" if side == "r" else "---" for side in align) + "|"
    return [row(columns), rule, *(row(cells) for cells in rows)]


def span(spread: Mapping[str, float], digits: int = 2) -> str:
    """A spread's ``min - max``."""
    return f"{spread['min']:.{digits}f} - {spread['max']:.{digits}f}"


def median_span(spread: Mapping[str, float], digits: int = 2) -> str:
    """A spread's ``median (min - max)``."""
    return f"{spread['median']:.{digits}f} ({span(spread, digits)})"


def verdict(met: bool | None, unjudged: str = "") -> str:
    """``met``, ``NOT met``, or ``unjudged`` when the suite does not judge the row."""
    return {True: "met", False: "NOT met", None: unjudged}[met]


def widths(hidden: Iterable[int]) -> str:
    """Hidden layer widths as the flags take them: ``512,512``."""
    return ",".join(map(str, hidden))


def machine_lines(machine: dict[str, Any]) -> list[str]:
    """The machine (:func:`benchmarks.machine.describe_machine`) as a few Markdown lines for
    the top of a report."""
    blas = [
        f"{pool['owner']}: {pool['library']} {pool['version']} ({pool['architecture']})"
        for pool in machine["thread_pools"]
        if pool["api"] == "blas"
    ]
    if machine.get("torch_blas"):
        blas.append(f"torch: {machine['torch_blas']}")
    versions = ", ".join(
        f"{name} {machine[name]}" for name in ("numpy", "torch", "cupy") if machine.get(name)
    )
    lines = [
        f"- CPU: {machine['cpu']}, {machine['cores']} logical cores "
        f"({machine['usable_cores']} usable)",
        f"- Python {machine['python']}, {versions}",
        f"- BLAS: {'; '.join(blas) or 'none detected'}",
    ]
    if machine.get("gpu"):
        lines.append(f"- GPU: {machine['gpu']}")
    return lines


def whole_report(
    title: str,
    machine: dict[str, Any],
    results: Mapping[str, dict[str, Any]],
    render: Callable[[str, dict[str, Any]], str],
) -> str:
    """The report of a command: its title, the machine, then each suite's section."""
    parts = [f"## {title}", "", *machine_lines(machine)]
    for name, result in results.items():
        parts += ["", render(name, result)]
    return "\n".join(parts)
