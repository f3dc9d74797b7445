"""RunsManager without HTTP: the run list, one run, lost runs, stop, clusters, incremental chart
data and the exports, all read from a real run store."""

from __future__ import annotations

import csv
import io
import json
import os
import socket

import pytest

from workbench.server import RunsManager
from workbench.store import RunStore

RECORD_FIELDS = {
    "id",
    "strategy",
    "devices",
    "steps",
    "step",
    "loss",
    "samples_per_second",
    "state",
    "error",
    "started",
    "ended",
    "dashboard_link",
    "restarts",
    "failures",
    "dropped_updates",
    "recovery_seconds",
    "failure_reasons",
    "damage",
    "non_finite",
}


def test_the_default_manager_reads_the_store_the_environment_names(store_root):
    assert RunsManager().store.root == store_root


def test_runs_are_listed_newest_first_with_their_live_fields(runs):
    runs.run("old", started=1000.0)
    runs.run("new", started=3000.0, state=None, recorded=2, dashboard_link="http://d/status")
    runs.run("middle", started=2000.0, state="failed", recorded=1)
    listed = RunsManager().runs()
    assert [record["id"] for record in listed] == ["new", "middle", "old"]
    assert all(set(record) == RECORD_FIELDS for record in listed)
    new, middle, old = listed
    assert new["state"] == "running" and new["step"] == 2 and new["steps"] == 4
    assert new["loss"] == pytest.approx(1.0) and new["dashboard_link"] == "http://d/status"
    assert new["strategy"] == "mirrored" and new["devices"] == 2 and new["ended"] is None
    assert middle["state"] == "failed" and old["state"] == "finished" and old["step"] == 4
    assert old["ended"] is not None


def test_missing_live_fields_read_as_none(store_root):
    # A run written before status.json had live fields: only state and times.
    path = store_root / "bare"
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"strategy": "one-device"}))
    (path / "status.json").write_text(json.dumps({"state": "finished", "started": 5.0}))
    (record,) = RunsManager().runs()
    assert record["state"] == "finished" and record["strategy"] == "one-device"
    assert all(record[name] is None for name in ("devices", "steps", "step", "loss", "ended"))


def test_a_running_run_whose_process_on_this_host_died_is_lost(runs, dead_pid):
    runs.run("died", state=None, pid=dead_pid, hostname=socket.gethostname())
    runs.run("elsewhere", state=None, pid=dead_pid, hostname="another-host")
    runs.run("alive", state=None, pid=os.getpid(), hostname=socket.gethostname())
    manager = RunsManager()
    states = {record["id"]: record["state"] for record in manager.runs()}
    # Another host's pid cannot be checked from here: it keeps its stated state.
    assert states == {"died": "lost", "elsewhere": "running", "alive": "running"}
    assert manager.run("died")["state"] == "lost"
    with pytest.raises(ValueError, match="lost"):
        manager.stop("died")


def test_one_run_has_its_config_and_its_summary_once_finished(runs):
    runs.run("done")
    runs.run("live", state=None, recorded=1)
    manager = RunsManager()
    done, live = manager.run("done"), manager.run("live")
    assert done["config"]["batch_size"] == 32 and done["summary"]["final_loss"] == 0.5
    assert live["summary"] is None and live["state"] == "running" and live["step"] == 1


@pytest.mark.parametrize("run_id", ["nope", "..", ".", "../runs", "a/b"])
def test_an_unknown_or_malformed_run_id_is_a_key_error_naming_it(runs, run_id):
    manager = RunsManager()
    for method in (manager.run, manager.stop, manager.trace, manager.scalars_csv):
        with pytest.raises(KeyError, match="no run"):
            method(run_id)
    with pytest.raises(KeyError):
        manager.chart_data(run_id, "loss")


def test_stop_asks_a_running_run_to_stop_and_refuses_any_other(runs, store_root):
    runs.run("live", state=None, recorded=1)
    runs.run("done")
    manager = RunsManager()
    record = manager.stop("live")
    assert record["state"] == "stopping" and record["id"] == "live"
    assert RunStore(store_root).open("live").stop_requested()
    with pytest.raises(ValueError, match="'done' is finished"):
        manager.stop("done")
    assert not RunStore(store_root).open("done").stop_requested()


def test_clusters_are_the_distinct_schedulers_of_running_runs(runs):
    cluster = {"scheduler_address": "tcp://10.0.0.1:8786", "dashboard_link": "http://h:8787"}
    runs.run("a", state=None, started=1.0, **cluster)
    runs.run("b", state=None, started=2.0, **cluster)
    runs.run("c", state=None, scheduler_address="tcp://10.0.0.2:8786", dashboard_link=None)
    runs.run("finished", scheduler_address="tcp://10.0.0.3:8786")  # no longer running
    runs.run("one-device", state=None)  # no cluster
    clusters = sorted(RunsManager().clusters(), key=lambda cluster: cluster["address"])
    assert clusters == [
        {"address": "tcp://10.0.0.1:8786", "dashboard_link": "http://h:8787", "runs": ["a", "b"]},
        {"address": "tcp://10.0.0.2:8786", "dashboard_link": None, "runs": ["c"]},
    ]


def test_chart_data_has_the_page_sources_and_grows_with_new_events(runs):
    recorder = runs.run("live", state=None, recorded=3)
    manager = RunsManager()
    first = manager.chart_data("live", "loss")
    assert first["state"] == "running"
    assert set(first["sources"]) == {"loss", "test_loss", "throughput"}
    assert first["sources"]["loss"]["step"] == [0, 1, 2]
    assert first["sources"]["loss"]["loss"] == pytest.approx([2.0, 1.0, 2 / 3])
    runs.record(recorder, 3)
    second = manager.chart_data("live", "loss")
    assert second["sources"]["loss"]["step"] == [0, 1, 2, 3]
    json.dumps(second, allow_nan=False)  # plain JSON: lists of numbers, no NaN

    utilization = manager.chart_data("live", "utilization")
    assert set(utilization["sources"]) == {"utilization", "stragglers"}
    # No GPU in this run: NVML columns are null, not NaN.
    assert utilization["sources"]["utilization"]["gpu_utilization"] == [None, None]
    assert utilization["factors"] == {
        "utilization": ["/task:1", "/task:0"],
        "stragglers": ["/task:1", "/task:0"],
    }
    traffic = manager.chart_data("live", "communication")["sources"]["traffic"]
    assert traffic == {"device": ["/task:0", "/task:1"], "sent": [4000] * 2, "received": [4000] * 2}
    timeline = manager.chart_data("live", "timeline")["sources"]["timeline"]
    assert len(timeline["phase"]) == 4 * 2 * 2

    recorder.finish("finished")
    assert manager.chart_data("live", "loss")["state"] == "finished"


def test_chart_data_refuses_an_unknown_page_naming_the_pages(runs):
    runs.run("done")
    with pytest.raises(KeyError, match="loss, utilization, timeline, communication"):
        RunsManager().chart_data("done", "weights")


def test_the_chart_cache_keeps_the_most_recently_viewed_runs(runs, monkeypatch):
    from workbench.server import manager as manager_module

    monkeypatch.setattr(manager_module, "CHARTS_KEPT", 2)
    for name in ("a", "b", "c"):
        runs.run(name, recorded=1)
    manager = RunsManager()
    for name in ("a", "b", "a", "c"):
        manager.chart_data(name, "loss")
    assert list(manager._charts) == ["a", "c"]


def test_trace_and_csv_export_the_run_events(runs):
    runs.run("done", steps=2)
    manager = RunsManager()
    trace = json.loads(manager.trace("done"))["traceEvents"]
    phases = [event for event in trace if event["ph"] == "X"]
    assert len(phases) == 2 * 2 * 2 and {event["name"] for event in phases} == {
        "compute",
        "allreduce",
    }
    rows = list(csv.DictReader(io.StringIO(manager.scalars_csv("done"))))
    assert [(row["step"], row["name"]) for row in rows] == [("0", "loss"), ("1", "loss")]


def test_chart_pages_keep_reading_a_run_whose_last_step_is_in_until_it_has_ended(runs):
    # Its test point and last events come after "finished": a chart tab that stopped polling
    # at the state would never draw them.
    recorder = runs.run("closing", state=None, recorded=4)
    manager = RunsManager()
    closing = manager.chart_data("closing", "loss")
    assert closing["state"] == "finished" and closing["recording"] is True
    assert [record["state"] for record in manager.runs()] == ["finished"]
    recorder.finish("finished", summary={"steps": 4, "first_step": 0})
    ended = manager.chart_data("closing", "loss")
    assert ended["state"] == "finished" and ended["recording"] is False
