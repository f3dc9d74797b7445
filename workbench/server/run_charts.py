"""A stored run's live charts, kept up to date from its events file, for the chart pages.

In: the bytes appended to ``<run>/events.jsonl`` since the last read
(:meth:`~workbench.store.StoredRun.read_events`): the server keeps one feed per run, and a
chart request reads only what the run wrote since the one before it. Out: the columns of the
chart sources a page draws, as JSON-ready lists (NaN and infinities become ``None``), and the
device order of its per-device figures. The charts are the notebook's
:class:`~workbench.charts.live_charts.LiveCharts` (the same code as the notebook and the
dashboard), so every view of a run shows the same numbers.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable
from typing import Any

import numpy as np
from bokeh.models import FactorRange

from workbench.charts.live_charts import LiveCharts
from workbench.events import EventLog
from workbench.events.log import Event
from workbench.store import StoredRun

# Each chart page and the LiveCharts figures it shows, in order.
PAGES: dict[str, tuple[str, ...]] = {
    "loss": ("loss", "throughput"),
    "utilization": ("utilization", "stragglers"),
    "timeline": ("phases", "timeline"),
    "communication": ("traffic",),
}


def page_figures(page: str) -> tuple[str, ...]:
    """The figure names of ``page``; ``KeyError`` naming the allowed pages if there is none."""
    if page not in PAGES:
        raise KeyError(f"no chart page {page!r}; pages: {', '.join(PAGES)}")
    return PAGES[page]


def json_column(values: Any) -> list:
    """A source column as a JSON list: NumPy scalars become Python numbers, NaN becomes None
    (JSON has no NaN, and Bokeh draws None as a gap)."""
    items = values.tolist() if isinstance(values, np.ndarray) else list(values)
    return [_json_value(item) for item in items]


def _json_value(item: Any) -> Any:
    if isinstance(item, np.generic):
        item = item.item()
    if isinstance(item, float) and not math.isfinite(item):
        return None
    return item


def sources_used(charts: LiveCharts, figure_names: Iterable[str]) -> list[str]:
    """The names (keys of ``charts.sources``) of the sources the figures draw, in that order."""
    drawn = {
        id(renderer.data_source)
        for name in figure_names
        for renderer in charts.figures[name].renderers
    }
    return [name for name, source in charts.sources.items() if id(source) in drawn]


class DrawnOnceLog(EventLog):
    """An :class:`EventLog` read by one reader only (the charts' feed), which hands each event
    over once and keeps none it handed over: following a run of any length holds no more
    events than arrive between two refreshes, and the charts keep at most their rollover of
    rows."""

    def __init__(self) -> None:
        super().__init__()
        self._handed_over = 0  # events before the kept ones

    def extend(self, events: list[Event]) -> None:
        """Append a read's events at once (no subscriber: nothing else watches this log)."""
        with self._lock:
            self._events.extend(events)

    def since(self, index: int) -> list[Event]:
        with self._lock:
            new = self._events[max(0, index - self._handed_over) :]
            self._handed_over += len(self._events)
            self._events = []
            return new


class RunCharts:
    """One run's chart feed: its events file read from where the previous :meth:`update`
    stopped, drawn by a :class:`LiveCharts`. A request costs what the run wrote since the one
    before it, and every chart is what a fresh read of the whole file would draw (the
    whole-run charts, phase shares and traffic, keep their totals from the first step)."""

    def __init__(self, run: StoredRun, batch_size: int) -> None:
        self.run, self.batch_size = run, batch_size
        self._lock = threading.Lock()  # tornado may run two page polls for one run at once
        self.log = DrawnOnceLog()
        self.charts = LiveCharts(self.log, batch_size)
        self._offset = 0
        self._drawn = False
        self.bytes_parsed = 0  # whole lines of the events file parsed, over every update

    def update(self) -> None:
        with self._lock:
            events, offset = self.run.read_events(self._offset)
            self.bytes_parsed += offset - self._offset
            self._offset = offset
            self.log.extend(events)
            if events or not self._drawn:
                self.charts.refresh()
                self._drawn = True

    def page_data(self, page: str) -> dict[str, Any]:
        """``sources``: the page's source columns; ``factors``: for each of its figures drawn
        per device, the devices in the order its y axis lists them."""
        names = page_figures(page)
        with self._lock:
            sources = {
                name: {column: json_column(values) for column, values in source.data.items()}
                for name in sources_used(self.charts, names)
                for source in [self.charts.sources[name]]
            }
            factors = {
                name: list(self.charts.figures[name].y_range.factors)
                for name in names
                if isinstance(self.charts.figures[name].y_range, FactorRange)
            }
        return {"sources": sources, "factors": factors}
