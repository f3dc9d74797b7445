"""A stored run's live charts, kept up to date from its events file, for the chart pages.

In: the bytes appended to ``<run>/events.jsonl`` since the last read
(:meth:`~workbench.store.StoredRun.read_events`). Out: the columns of the chart sources a page
draws, as JSON-ready lists (NaN and infinities become ``None``), and the device order of its
per-device figures. The charts are the notebook's :class:`~workbench.charts.live_charts.LiveCharts`
(the same code as the notebook and the dashboard), so every view of a run shows the same numbers.
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
from workbench.store import StoredRun

# Each chart page and the LiveCharts figures it shows, in order.
PAGES: dict[str, tuple[str, ...]] = {
    "loss": ("loss", "throughput"),
    "utilization": ("utilization", "stragglers"),
    "timeline": ("phases", "timeline"),
    "communication": ("traffic",),
}
# A view that has copied this many events starts over from the end of the file, so watching a
# long run stays in bounded memory (the charts keep at most their rollover of rows anyway).
EVENTS_KEPT = 200_000
RESTART_TAIL_BYTES = 8 * 2**20


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


class RunCharts:
    """One run's events copied into an :class:`EventLog` and drawn by a :class:`LiveCharts`;
    :meth:`update` reads only what was appended since the previous call."""

    def __init__(self, run: StoredRun, batch_size: int) -> None:
        self.run, self.batch_size = run, batch_size
        self._lock = threading.Lock()  # tornado may run two page polls for one run at once
        self._start(offset=0)

    def _start(self, offset: int) -> None:
        self.log = EventLog()
        self.charts = LiveCharts(self.log, self.batch_size)
        self._offset, self._copied = offset, 0

    def _restart_near_the_end(self) -> None:
        size = (self.run.path / "events.jsonl").stat().st_size
        offset = max(0, size - RESTART_TAIL_BYTES)
        if offset:
            # Begin at the first whole line inside the tail.
            with (self.run.path / "events.jsonl").open("rb") as file:
                file.seek(offset)
                offset += len(file.readline())
        self._start(offset)

    def update(self) -> None:
        with self._lock:
            if self._copied > EVENTS_KEPT:
                self._restart_near_the_end()
            events, self._offset = self.run.read_events(self._offset)
            for event in events:
                self.log.emit(event)
            self._copied += len(events)
            if events or self._copied == 0:
                self.charts.refresh()

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
