"""The whole run's timeline at a glance: per device and time interval, the share of the interval
each phase took (the timeline page's "phase shares" chart; docs/jupyterlab.md, "Chart tabs").

A long run's detailed timeline is a barcode in which the phases cannot be told apart; here the
run is cut into at most ``MAX_INTERVALS`` intervals of equal length (the length doubles, merging
neighbours, whenever the run outgrows them), so the chart keeps a few hundred rows however long
the run is. Each interval is drawn as a stacked bar in the device's row: each phase as tall as
its share of the interval, in the order the run had them and the timeline's colours, so a phase
that takes a steady share reads as a band across the run; what is left at the top is idle.
"""

from __future__ import annotations

import math
from collections import defaultdict

MAX_INTERVALS = 60  # across the run: wide enough to read each phase's share
FIRST_INTERVAL_S = 0.01  # the interval a run starts with, doubled as it grows
ROW_HEIGHT = 0.8  # of a device's row, as the timeline's bars
SHARE_COLUMNS = ("device", "phase", "interval_start", "interval_end", "share", "bottom", "top")


class PhaseShares:
    """Seconds per (device, interval, phase), added to as phases arrive.

    Examples
    --------
    >>> shares = PhaseShares(first_interval=1.0)
    >>> shares.add("d0", "compute", 0.0, 0.5)
    >>> shares.add("d0", "allreduce", 0.5, 0.75)
    >>> table = shares.table(["compute", "allreduce"])
    >>> table["phase"], table["share"], table["top"]
    (['compute', 'allreduce'], [0.5, 0.25], [['d0', 0.0], ['d0', 0.2]])
    """

    def __init__(self, first_interval: float = FIRST_INTERVAL_S) -> None:
        self.interval = first_interval
        self._origin: float | None = None
        self._seconds: dict[tuple[str, int, str], float] = defaultdict(float)
        self._first = self._last = 0  # the interval indices seen, relative to the origin

    def add(self, device: str, phase: str, start: float, end: float) -> None:
        """Count ``[start, end]`` of ``phase`` on ``device``, split across the intervals it
        spans."""
        if self._origin is None:
            self._origin = start
        self._grow_to(start, end)
        width, origin = self.interval, self._origin
        index = math.floor((start - origin) / width)
        while True:
            left = origin + index * width
            overlap = min(end, left + width) - max(start, left)
            if overlap > 0:
                self._seconds[(device, index, phase)] += overlap
            if left + width >= end:
                return
            index += 1

    def _grow_to(self, start: float, end: float) -> None:
        """Double the interval until ``[start, end]`` and what came before fit in
        ``MAX_INTERVALS``."""
        origin = self._origin or 0.0
        first = min(self._first, math.floor((start - origin) / self.interval))
        last = max(self._last, math.floor((end - origin) / self.interval))
        while last - first + 1 > MAX_INTERVALS:
            merged: dict[tuple[str, int, str], float] = defaultdict(float)
            for (device, index, phase), seconds in self._seconds.items():
                merged[(device, index // 2, phase)] += seconds
            self._seconds = merged
            self.interval *= 2
            first, last = first // 2, last // 2
        self._first, self._last = first, last

    def table(self, phase_order: list[str]) -> dict[str, list]:
        """One row per (device, interval, phase) with time in it: the phase's ``share`` of
        the interval, the interval (in the timeline's seconds) and where its part of the bar
        sits in the device's row (``bottom``, ``top``: ``[device, offset]``, Bokeh's
        categorical offsets). A device's phases stack in ``phase_order`` (others after);
        where they overlapped (a transfer on a communication thread), their shares are scaled
        to fill at most the interval."""
        rank = {phase: position for position, phase in enumerate(phase_order)}
        by_interval: dict[tuple[str, int], list[tuple[str, float]]] = defaultdict(list)
        for (device, index, phase), seconds in self._seconds.items():
            by_interval[(device, index)].append((phase, seconds))
        rows: dict[str, list] = {name: [] for name in SHARE_COLUMNS}
        width, origin = self.interval, self._origin or 0.0
        for (device, index), phases in sorted(by_interval.items()):
            phases.sort(key=lambda item: (rank.get(item[0], len(rank)), item[0]))
            busy = sum(seconds for _, seconds in phases)
            scale = min(1.0, width / busy) if busy > 0 else 1.0
            start = origin + index * width
            below = 0.0  # the shares stacked so far
            for phase, seconds in phases:
                share = seconds * scale / width
                rows["device"].append(device)
                rows["phase"].append(phase)
                rows["interval_start"].append(start)
                rows["interval_end"].append(start + width)
                rows["share"].append(share)
                rows["bottom"].append([device, _offset(below)])
                rows["top"].append([device, _offset(below + share)])
                below += share
        return rows


def _offset(stacked: float) -> float:
    """Where a stacked share sits in its device's row, from the row's centre."""
    return round((stacked - 0.5) * ROW_HEIGHT, 9)
