"""What the memory charts show, from the measured-memory scalars alone, without Bokeh
(docs/guide/command-line.md, "Measured memory").

Each device reports now and then the most it held since its last report: ``memory/peak_bytes``
and that moment's split by category (``memory/at_peak/<category>``), all at the report's step
(:mod:`workbench.events.memory_summary`). :class:`MemoryReports` turns them into

- ``memory``: rows to stream, one per report, each a segment from the device's previous report
  to this one (one line per device, in the device's colour, however the reports interleave);
- ``memory_split``: per device, the split of its last report (the stacked bars), replaced;
- ``memory_predicted``: per device, the run's predicted peak (a dashed line and a tick), for a
  run that has a prediction.

A device keeps the colour of its first report; the colours are those the device views use
(Category10 in device order, :mod:`workbench.notebook.graph_view`).
"""

from __future__ import annotations

from collections.abc import Mapping

from workbench.events.memory_summary import AT_PEAK, PEAK
from workbench.events.records import ScalarEvent

# The ledger's categories, in its order (workbench/ir/memory.py, a layer above this one).
CATEGORIES = ("parameters", "optimizer", "gradients", "activations", "communication")
# Bokeh's Category10, as the device views colour devices (here without importing Bokeh).
DEVICE_COLOURS = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
PREDICTED_LABEL = "predicted peak"
MEMORY_COLUMNS = ("device", "label", "colour", "step0", "peak0", "step", "peak_bytes")
SPLIT_COLUMNS = ("device", "label", "colour", "step", "peak_bytes", *CATEGORIES)
PREDICTED_COLUMNS = ("device", "label", "colour", "predicted_bytes", "kind")


def short_device_name(device: str) -> str:
    """The short name the device axes show (``workbench.runtime.devices.device_tag``, which
    this layer cannot import).

    Examples
    --------
    >>> short_device_name("/job:worker/task:1/device:CPU:0"), short_device_name("cpu:0")
    ('task1-cpu0', 'cpu:0')
    >>> short_device_name("/job:ps/task:0/device:GPU:1")
    'ps-task0-gpu1'
    """
    parts = dict(part.split(":", 1) for part in device.strip("/").split("/") if ":" in part)
    if "task" not in parts:
        return device
    kind, _, index = parts.get("device", "CPU:0").partition(":")
    job = parts.get("job", "worker")
    prefix = "" if job == "worker" else f"{job}-"
    return f"{prefix}task{parts['task']}-{kind.lower()}{index}"


class MemoryReports:
    """The memory reports of a growing event log: give it every scalar (:meth:`add`), then
    read what is new (:meth:`new_segments`) and the current tables.

    Examples
    --------
    >>> reports = MemoryReports()
    >>> for step, peak in ((0, 96), (20, 128)):
    ...     _ = reports.add(ScalarEvent(PEAK, step, peak, 0.0, "cpu:0"))
    >>> segments = reports.new_segments()
    >>> segments["step0"], segments["step"], segments["peak_bytes"]
    ([0, 0], [0, 20], [96, 128])
    >>> reports.split()["peak_bytes"]
    [128]
    """

    def __init__(self) -> None:
        self._colour: dict[str, str] = {}  # device -> its colour, in order of first report
        self._last: dict[str, tuple[int, float]] = {}  # device -> (step, peak) of its report
        self._at_peak: dict[str, dict[str, float]] = {}  # device -> split at that report
        self._segments: dict[str, list] = {name: [] for name in MEMORY_COLUMNS}

    def add(self, event: ScalarEvent) -> bool:
        """Take ``event`` if it is part of a device's memory report; whether it was."""
        device = event.device
        if device is None:
            return False
        if event.name == PEAK:
            previous = self._last.get(device, (event.step, event.value))
            if event.step < previous[0]:  # an older report arriving late: the line goes on
                return True
            self._last[device] = (event.step, event.value)
            if event.step != previous[0] or device not in self._at_peak:
                self._at_peak[device] = {}  # this report's split follows it
            row = (device, short_device_name(device), self.colour(device), *previous)
            for name, value in zip(MEMORY_COLUMNS, (*row, event.step, event.value), strict=True):
                self._segments[name].append(value)
            return True
        if event.name.startswith(AT_PEAK):
            last = self._last.get(device)
            if last is None or event.step == last[0]:  # the split of the device's last report
                self._at_peak.setdefault(device, {})[event.name.removeprefix(AT_PEAK)] = event.value
            return True
        return event.name.startswith("memory/")

    def colour(self, device: str) -> str:
        """``device``'s colour (a new device gets the next one)."""
        if device not in self._colour:
            self._colour[device] = DEVICE_COLOURS[len(self._colour) % len(DEVICE_COLOURS)]
        return self._colour[device]

    def new_segments(self) -> dict[str, list]:
        """The segments added since the last call (empty columns if none)."""
        segments, self._segments = self._segments, {name: [] for name in MEMORY_COLUMNS}
        return segments

    def split(self) -> dict[str, list]:
        """Per device that reported, its last report: step, peak and bytes by category."""
        table: dict[str, list] = {name: [] for name in SPLIT_COLUMNS}
        for device, (step, peak) in self._last.items():
            split = self._at_peak.get(device, {})
            named = (device, short_device_name(device), self._colour[device])
            values = (*named, step, peak, *(split.get(category, 0.0) for category in CATEGORIES))
            for name, value in zip(SPLIT_COLUMNS, values, strict=True):
                table[name].append(value)
        return table

    def devices(self) -> list[str]:
        return list(self._colour)

    def predicted(self, totals: Mapping[str, int]) -> dict[str, list]:
        """The ``memory_predicted`` table: per device, its predicted peak in bytes."""
        table: dict[str, list] = {name: [] for name in PREDICTED_COLUMNS}
        for device, total in totals.items():
            values = (device, short_device_name(device), self.colour(device), total)
            for name, value in zip(PREDICTED_COLUMNS, (*values, PREDICTED_LABEL), strict=True):
                table[name].append(value)
        return table
