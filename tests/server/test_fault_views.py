"""A run's faults as the JupyterLab side gets them: the fault counts in its run record (None for
a run recorded before them) and the fault sources of its timeline chart page."""

from __future__ import annotations

import json

import pytest

from tests.fault_events import (
    FAILED_DEVICE,
    NOTICED,
    RESUMED,
    after_the_failure,
    before_the_failure,
)
from workbench.server import RunsManager


def _record_all(recorder, events) -> None:
    for event in events:
        recorder.record(event)


def test_a_run_record_carries_the_fault_counts_as_the_run_goes(runs):
    recorder = runs.run("faulty", state=None, recorded=0, strategy="parameter-server")
    manager = RunsManager()
    (clean,) = manager.runs()
    assert (clean["restarts"], clean["failures"], clean["dropped_updates"]) == (0, 0, 0)
    assert clean["recovery_seconds"] == []
    _record_all(recorder, before_the_failure())
    assert manager.run("faulty")["failures"] == 1
    _record_all(recorder, after_the_failure())
    record = manager.run("faulty")
    assert (record["restarts"], record["failures"], record["dropped_updates"]) == (1, 1, 1)
    assert record["recovery_seconds"] == pytest.approx([RESUMED - NOTICED])


def test_a_run_recorded_before_fault_counts_reads_none(store_root):
    path = store_root / "old"
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"strategy": "mirrored"}))
    (path / "status.json").write_text(json.dumps({"state": "finished", "step": 4}))
    (record,) = RunsManager().runs()
    fields = ("restarts", "failures", "dropped_updates", "recovery_seconds")
    assert all(record[name] is None for name in fields)


def test_the_timeline_page_sends_the_fault_sources_and_grows_with_them(runs):
    recorder = runs.run("faulty", state=None, recorded=0)
    _record_all(recorder, before_the_failure())
    manager = RunsManager()
    first = manager.chart_data("faulty", "timeline")["sources"]
    faults = {"failures", "recoveries", "dropped"}
    assert set(first) == {"phase_shares", "timeline", "actions", *faults}
    assert first["failures"]["device"] == [FAILED_DEVICE]
    assert first["recoveries"]["phase"] == [] and first["dropped"]["phase"] == []
    _record_all(recorder, after_the_failure())
    later = manager.chart_data("faulty", "timeline")
    assert later["sources"]["recoveries"]["end"] == [RESUMED, RESUMED]
    assert later["sources"]["dropped"]["step"] == [4]
    assert "failure" not in later["sources"]["timeline"]["phase"]
    json.dumps(later, allow_nan=False)
