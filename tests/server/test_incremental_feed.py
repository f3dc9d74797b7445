"""The chart tabs' per-run feed: a request reads only what the run wrote since the last one,
holds no more events than that, and answers what a fresh read of the whole file answers."""

from __future__ import annotations

import pytest

from workbench.server import run_charts
from workbench.server.run_charts import PAGES, RunCharts
from workbench.store import RunStore

FIRST_STEPS, NEW_STEPS = 30, 5


class CountingRun:
    """A stored run whose reads of its events file are counted (lines and bytes)."""

    def __init__(self, run) -> None:
        self.run, self.path, self.run_id = run, run.path, run.run_id
        self.lines = self.bytes = 0

    def read_events(self, offset: int = 0):
        events, after = self.run.read_events(offset)
        self.lines += len(events)
        self.bytes += after - offset
        return events, after


def every_page(charts: RunCharts) -> dict:
    return {page: charts.page_data(page) for page in PAGES}


@pytest.fixture
def live_run(runs):
    """A running two-device run with ``FIRST_STEPS`` steps recorded."""
    recorder = runs.run("feed", steps=FIRST_STEPS + NEW_STEPS, recorded=FIRST_STEPS, state=None)
    return recorder, RunStore().open("feed")


def test_a_second_request_reads_only_the_new_lines_and_equals_a_fresh_full_read(
    live_run, runs, monkeypatch
):
    # A feed that would start over after a few events (to bound its memory) must not: the
    # whole-run charts would lose their first steps and the new request would read old lines.
    monkeypatch.setattr(run_charts, "EVENTS_KEPT", 10, raising=False)
    recorder, stored = live_run
    run = CountingRun(stored)
    charts = RunCharts(run, batch_size=32)
    charts.update()
    lines, size = run.lines, (stored.path / "events.jsonl").stat().st_size
    assert run.bytes == size

    for step in range(FIRST_STEPS, FIRST_STEPS + NEW_STEPS):
        runs.record(recorder, step)
    new_lines = NEW_STEPS * 5  # per step: compute and all-reduce on two devices, the loss
    charts.update()
    assert run.lines - lines == new_lines
    assert run.bytes - size == (stored.path / "events.jsonl").stat().st_size - size
    # What was drawn is dropped: the feed holds no events beyond the last read's.
    assert len(charts.log.events) <= new_lines

    fresh = RunCharts(stored, batch_size=32)
    fresh.update()
    assert every_page(charts) == every_page(fresh)
