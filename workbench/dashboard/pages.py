"""The workbench's dashboard pages: the notebook's live charts, fed from the run board.

A page follows the newest run on the board, or the one its address names
(``/individual-workbench-loss?run=<run id>``, with the id the sidebar, the CLI and the panel
show, for two runs side by side). Above its figures, a line says how far the run is
(``step 120/2000``), brought up to date on every refresh. It copies that run's
events into an :class:`~workbench.events.EventLog` of its own and draws it with the notebook's
:class:`~workbench.charts.live_charts.LiveCharts` (the same charts, the same code), building only
the figures of its page. When a newer run appears, a page that follows the newest starts over
with that run.
"""

from __future__ import annotations

from bokeh.document import Document
from bokeh.layouts import column
from bokeh.models import Div

from workbench.charts.live_charts import MAX_REFRESH_HZ, LiveCharts
from workbench.dashboard.run_board import PHASES_KEPT, SCALARS_KEPT, RunBoard
from workbench.events import EventLog

# 5 refreshes a second: live enough, and never above the charts' own cap. With the publisher's
# own period (workbench/dashboard/publisher.py, PUBLISH_HZ) a step the devices finished shows
# on the page well within a second.
REFRESH_MILLISECONDS = max(200, 1000 // MAX_REFRESH_HZ)
STEP_CSS_CLASS = "dtrain-board-step"  # what a browser test (or a user style) finds the line by
# A page that has copied this many events starts over from what the board keeps, so an open
# page lives in bounded memory however long the run goes.
PAGE_EVENTS_KEPT = 2 * (SCALARS_KEPT + PHASES_KEPT)
NO_RUN = "no workbench run yet"


def describe(run_id: str, description: dict, finished: bool) -> str:
    """The caption after each figure's title, e.g. ``mirrored, 2 devices, run 3f2a… (live)``."""
    devices = description.get("devices") or []
    parts = [
        description.get("strategy", "run"),
        f"{len(devices)} devices" if devices else None,
        f"run {run_id}",
    ]
    caption = ", ".join(part for part in parts if part)
    return f"{caption} ({'finished' if finished else 'live'})"


def step_text(step: int, description: dict) -> str:
    """The line above a page's figures: ``step 120/2000`` (steps done of the run's steps).

    Examples
    --------
    >>> step_text(120, {"steps": 2000}), step_text(0, {})
    ('step 120/2000', 'step 0/?')
    """
    steps = description.get("steps")
    return f"step {step}/{steps if steps is not None else '?'}"


class RunPage:
    """One open page (one Bokeh document): ``root`` holds its figures, :meth:`tick` brings them
    up to date with the board."""

    def __init__(
        self, board: RunBoard, figure_names: tuple[str, ...], pinned_run: str | None = None
    ) -> None:
        self.board, self.figure_names, self.pinned_run = board, figure_names, pinned_run
        self.root = column(sizing_mode="stretch_both")
        self.step_line = Div(
            text="", css_classes=[STEP_CSS_CLASS], styles={"font-weight": "bold", "margin": "4px"}
        )
        self.run_id: str | None = None
        self._position = 0
        self._finished = False
        self._show(None)

    def _show(self, run_id: str | None) -> None:
        run = self.board.run(run_id) if run_id is not None else None
        description = run.description if run is not None else {}
        self.run_id, self._position, self._finished, self._copied = run_id, 0, False, 0
        self.log = EventLog()
        batch_size = int(description.get("batch_size") or 1)
        self.charts = LiveCharts(self.log, batch_size, figure_names=self.figure_names)
        self.figures = [self.charts.figures[name] for name in self.figure_names]
        self._titles = [chart.title.text for chart in self.figures]
        for chart in self.figures:
            chart.sizing_mode = "stretch_both"
        self._caption(description if run is not None else None)
        self.step_line.text = step_text(run.step if run is not None else 0, description)
        self.root.children = [self.step_line, *self.figures]

    def _caption(self, description: dict | None) -> None:
        if description is not None:
            caption = describe(self.run_id, description, self._finished)
        elif self.pinned_run is not None:
            caption = f"no run {self.pinned_run} on this scheduler"
        else:
            caption = NO_RUN
        for chart, title in zip(self.figures, self._titles):
            chart.title.text = f"{title} — {caption}"

    def tick(self) -> None:
        """Follow the run (the newest, or the pinned one) and draw what arrived since the
        last tick."""
        if self.pinned_run is None:
            followed = self.board.latest()
        else:  # the pinned run, once the board has it
            followed = self.pinned_run if self.board.run(self.pinned_run) else None
        if followed != self.run_id or self._copied > PAGE_EVENTS_KEPT:
            self._show(followed)
        if self.run_id is None:
            return
        new, self._position = self.board.read(self.run_id, self._position)
        for event in new:
            self.log.emit(event)
        self._copied += len(new)
        run = self.board.run(self.run_id)
        if run is not None:
            self.step_line.text = step_text(run.step, run.description)
        finished = run is not None and run.finished
        if finished != self._finished:
            self._finished = finished
            self._caption(run.description)
        if new:
            self.charts.refresh()


def show_page(
    figure_names: tuple[str, ...],
    board: RunBoard,
    document: Document,
    pinned_run: str | None = None,
) -> RunPage:
    """Build a page of the charts ``figure_names`` into ``document`` and keep it fresh (the
    Bokeh server calls the periodic callback on the scheduler's event loop, where the board is
    filled too). ``pinned_run``: follow that run rather than the newest."""
    page = RunPage(board, figure_names, pinned_run)
    page.tick()
    document.add_root(page.root)
    document.title = f"dtrain: {' and '.join(page.figure_names)}"
    document.add_periodic_callback(page.tick, REFRESH_MILLISECONDS)
    return page
