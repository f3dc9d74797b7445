"""Fault events in the Chrome trace: a failure as an instant on its device's thread, recovery
and dropped pushes as complete events marked as faults, the fault counts as counters."""

from __future__ import annotations

import json

import pytest

from tests.fault_events import DROPPED, FAILED_DEVICE, NOTICED, RESUMED, fault_run
from workbench.store import chrome_trace, write_chrome_trace


def _process_names(trace: list[dict]) -> dict[int, str]:
    return {event["pid"]: event["args"]["name"] for event in trace if event["ph"] == "M"}


def test_a_failure_is_an_instant_on_the_thread_of_the_device_that_failed():
    trace = chrome_trace(fault_run())["traceEvents"]
    (failure,) = [event for event in trace if event["name"] == "failure"]
    assert failure["ph"] == "i" and failure["s"] == "t"
    assert failure["ts"] == pytest.approx(NOTICED * 1e6) and "dur" not in failure
    assert failure["args"] == {"step": 3}
    assert "fault" in failure["cat"].split(",")
    assert _process_names(trace)[failure["pid"]] == FAILED_DEVICE
    # On the thread the device's phases are on, so a viewer draws it on that row.
    assert failure["tid"] == 0


def test_recovery_and_dropped_pushes_are_complete_events_in_the_fault_category():
    trace = chrome_trace(fault_run())["traceEvents"]
    recoveries = [event for event in trace if event["name"] == "recovery"]
    assert len(recoveries) == 2 and all(event["ph"] == "X" for event in recoveries)
    assert all(event["dur"] == pytest.approx((RESUMED - NOTICED) * 1e6) for event in recoveries)
    (dropped,) = [event for event in trace if event["name"] == "dropped"]
    assert dropped["ph"] == "X" and dropped["args"]["bytes_sent"] == DROPPED.bytes
    assert dropped["cat"] == "fault,dropped" and recoveries[0]["cat"] == "fault,recovery"
    # Ordinary phases keep their one category.
    assert {event["cat"] for event in trace if event["name"] == "compute"} == {"compute"}


def test_fault_counts_are_counters_and_the_file_is_plain_json(tmp_path):
    trace = chrome_trace(fault_run())["traceEvents"]
    counters = {event["name"]: event for event in trace if event["ph"] == "C"}
    assert counters["restarts"]["args"] == {"restarts": 1.0}
    assert counters["recovery_seconds"]["args"] == {"recovery_seconds": RESUMED - NOTICED}
    dropped = counters["dropped_updates"]
    assert dropped["args"] == {"dropped_updates": 1.0}
    assert _process_names(trace)[dropped["pid"]] == DROPPED.device  # it names its device
    path = tmp_path / "trace.json"
    write_chrome_trace(fault_run(), str(path))
    assert json.loads(path.read_text())["traceEvents"] == trace
