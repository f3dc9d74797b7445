"""Measured memory, from events only: the scalars each device reports and the ``memory`` object
of ``--json`` built from them (docs/guide/command-line.md, "Measured memory").

A device reports, at the last step of each task (or every few steps on one device), the most it
held during the steps since its last report: ``memory/peak_bytes``, the split of that moment
(``memory/at_peak/<category>``), each category's own high-water (``memory/peak/<category>``),
what it held when a step began, before any graph ran (``memory/resident_bytes``, split as
``memory/resident/<category>``: its parameters and optimizer state, a shard's under ZeRO), the
process's resident-set high-water (``memory/rss_peak_bytes``) and, on GPUs, the CuPy memory
pool's (``memory/gpu_pool_peak_bytes``). They travel as any other scalar, so the run store
keeps them with the run's events and the charts can plot them over time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from workbench.events.log import EventLog
from workbench.events.records import ScalarEvent

PREFIX = "memory/"
PEAK = "memory/peak_bytes"
RSS_PEAK = "memory/rss_peak_bytes"
GPU_POOL_PEAK = "memory/gpu_pool_peak_bytes"
AT_PEAK = "memory/at_peak/"
CATEGORY_PEAK = "memory/peak/"
RESIDENT = "memory/resident_bytes"
RESIDENT_SPLIT = "memory/resident/"


def memory_scalars(
    device: str,
    step: int,
    total: int,
    at_peak: Mapping[str, int],
    by_category: Mapping[str, int],
    rss_peak: int | None,
    gpu_pool_peak: int | None,
    resident: Mapping[str, int] | None = None,
) -> list[tuple[str, int, float, str]]:
    """The ``(name, step, value, device)`` scalars of one report; ``resident``: the bytes by
    category held when a step began.

    Examples
    --------
    >>> [name for name, *_ in memory_scalars("cpu:0", 3, 96, {"parameters": 64,
    ...     "activations": 32}, {"parameters": 64, "activations": 40}, 1 << 20, None)]
    ... # doctest: +NORMALIZE_WHITESPACE
    ['memory/peak_bytes', 'memory/at_peak/parameters', 'memory/at_peak/activations',
     'memory/peak/parameters', 'memory/peak/activations', 'memory/rss_peak_bytes']
    """
    scalars: list[tuple[str, int, float, str]] = [(PEAK, step, total, device)]
    scalars += [(AT_PEAK + name, step, nbytes, device) for name, nbytes in at_peak.items()]
    scalars += [
        (CATEGORY_PEAK + name, step, nbytes, device) for name, nbytes in by_category.items()
    ]
    if resident is not None:
        scalars.append((RESIDENT, step, sum(resident.values()), device))
        scalars += [
            (RESIDENT_SPLIT + name, step, nbytes, device) for name, nbytes in resident.items()
        ]
    if rss_peak is not None:
        scalars.append((RSS_PEAK, step, rss_peak, device))
    if gpu_pool_peak is not None:
        scalars.append((GPU_POOL_PEAK, step, gpu_pool_peak, device))
    return scalars


def memory_summary(log: EventLog, devices: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The ``memory`` object of ``--json``: per device that reported, ``peak_bytes`` (its
    largest report), ``at_peak`` (that report's split by category), ``by_category`` (each
    category's largest), ``resident_bytes`` and ``resident`` (the most a device held when a
    step began, and its split by category), ``rss_peak_bytes`` and, on GPUs,
    ``gpu_pool_peak_bytes``."""
    reports: dict[str, dict[int, dict[str, float]]] = {}
    for event in log.events:
        if not isinstance(event, ScalarEvent) or event.device is None:
            continue
        if event.name.startswith(PREFIX):
            step = reports.setdefault(event.device, {}).setdefault(event.step, {})
            step[event.name] = event.value
    summary: dict[str, dict[str, Any]] = {}
    for device in [*devices, *sorted(set(reports) - set(devices))]:
        steps = reports.get(device)
        if not steps:
            continue
        largest = max(steps.values(), key=lambda report: report.get(PEAK, 0.0))
        entry: dict[str, Any] = {
            "peak_bytes": int(largest.get(PEAK, 0)),
            "at_peak": _by_category(largest, AT_PEAK),
            "by_category": {},
        }
        for report in steps.values():
            for category, nbytes in _by_category(report, CATEGORY_PEAK).items():
                entry["by_category"][category] = max(nbytes, entry["by_category"].get(category, 0))
        residents = [report for report in steps.values() if RESIDENT in report]
        if residents:
            most = max(residents, key=lambda report: report[RESIDENT])
            entry["resident_bytes"] = int(most[RESIDENT])
            entry["resident"] = _by_category(most, RESIDENT_SPLIT)
        for key, name in (("rss_peak_bytes", RSS_PEAK), ("gpu_pool_peak_bytes", GPU_POOL_PEAK)):
            seen = [report[name] for report in steps.values() if name in report]
            if seen:
                entry[key] = int(max(seen))
        summary[device] = entry
    return summary


def largest_peak_line(memory: Mapping[str, Mapping[str, Any]]) -> str | None:
    """One line for the human summary: the largest device peak and how it splits.

    Examples
    --------
    >>> largest_peak_line({"cpu:0": {"peak_bytes": 3 << 20, "at_peak": {"parameters": 2 << 20,
    ...     "gradients": 0, "activations": 1 << 20}}, "cpu:1": {"peak_bytes": 9000,
    ...     "at_peak": {"parameters": 8192, "activations": 808}}})
    'peak memory 3.0 MiB on cpu:0: parameters 2.0 MiB, activations 1.0 MiB'
    >>> largest_peak_line({"cpu:1": {"peak_bytes": 9000, "at_peak": {"parameters": 8192,
    ...     "activations": 808}}})
    'peak memory 8.8 KiB on cpu:1: parameters 8.0 KiB, activations 808 B'
    """
    if not memory:
        return None
    device, entry = max(memory.items(), key=lambda item: item[1]["peak_bytes"])
    parts = [f"{name} {_size(nbytes)}" for name, nbytes in entry["at_peak"].items() if nbytes]
    return f"peak memory {_size(entry['peak_bytes'])} on {device}: {', '.join(parts)}"


def _by_category(report: Mapping[str, float], prefix: str) -> dict[str, int]:
    return {
        name.removeprefix(prefix): int(value)
        for name, value in report.items()
        if name.startswith(prefix)
    }


def _size(nbytes: float) -> str:
    """Bytes in the largest binary unit that keeps a digit before the point."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if nbytes >= 1 << shift:
            return f"{nbytes / (1 << shift):.1f} {unit}"
    return f"{int(nbytes)} B"
