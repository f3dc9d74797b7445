"""Fault counts in status.json: what the JupyterLab sidebar and other processes read of a run's
failures, restarts and dropped pushes while it goes and once it ended."""

from __future__ import annotations

import pytest

from tests.fault_events import (
    NOTICED,
    RESUMED,
    after_the_failure,
    before_the_failure,
    step,
)
from workbench.events.records import ScalarEvent
from workbench.store import RunStore
from workbench.store import run_store as run_store_module

CONFIG = {"strategy": "parameter-server", "devices": 2, "batch_size": 32}


def test_a_new_run_has_no_faults(tmp_path):
    status = RunStore(tmp_path).create("r1", CONFIG).run.status()
    assert status["restarts"] == status["failures"] == status["dropped_updates"] == 0
    assert status["recovery_seconds"] == []


def test_status_counts_failures_restarts_recovery_and_dropped_pushes(tmp_path, monkeypatch):
    monkeypatch.setattr(run_store_module, "STATUS_EVERY_S", 0.0)  # rewrite at every event
    recorder = RunStore(tmp_path).create("r1", CONFIG, steps=5)
    for event in before_the_failure():
        recorder.record(event)
    status = recorder.run.status()
    assert status["failures"] == 1 and status["restarts"] == 0
    for event in after_the_failure():
        recorder.record(event)
    status = recorder.run.status()
    assert status["failures"] == 1 and status["restarts"] == 1
    assert status["recovery_seconds"] == pytest.approx([RESUMED - NOTICED])
    assert status["dropped_updates"] == 1
    recorder.record(ScalarEvent("dropped_updates", 5, 14.0, 8.0))
    recorder.finish("finished", summary={"samples_per_second": 100.0})
    status = recorder.run.status()
    assert status["state"] == "finished" and status["dropped_updates"] == 14
    assert recorder.run.summary() == {"samples_per_second": 100.0}  # the summary is the run's


def test_a_failure_reaches_status_at_once_though_no_step_follows(tmp_path, monkeypatch):
    monkeypatch.setattr(run_store_module, "STATUS_EVERY_S", 3600.0)  # only urgent rewrites
    recorder = RunStore(tmp_path).create("r1", CONFIG)
    for event in before_the_failure():
        recorder.record(event)
    status = recorder.run.status()
    assert status["failures"] == 1
    # The failure is in events.jsonl too, for a reader of the events (the chart pages).
    assert recorder.run.events()[-1].phase == "failure"
    for event in after_the_failure()[:4]:  # both recoveries, restarts, recovery_seconds
        recorder.record(event)
    assert recorder.run.status()["restarts"] == 1


def test_dropped_pushes_alone_wait_for_the_regular_rewrite(tmp_path, monkeypatch):
    monkeypatch.setattr(run_store_module, "STATUS_EVERY_S", 3600.0)
    recorder = RunStore(tmp_path).create("r1", CONFIG)
    recorder.record(step(0, 0.0)[0])  # the first event rewrites (no rewrite has been yet)
    recorder.record(ScalarEvent("dropped_updates", 0, 3.0, 0.5))
    assert recorder.run.status()["dropped_updates"] == 0
    recorder.finish("stopped")
    assert recorder.run.status()["dropped_updates"] == 3


def test_cumulative_counts_keep_their_largest_value_whatever_order_devices_report_in(tmp_path):
    recorder = RunStore(tmp_path).create("r1", CONFIG)
    for value in (5.0, 7.0, 6.0):  # two devices' batches, the later one sent first
        recorder.record(ScalarEvent("dropped_updates", 0, value, 1.0))
    recorder.finish("finished")
    assert recorder.run.status()["dropped_updates"] == 7
