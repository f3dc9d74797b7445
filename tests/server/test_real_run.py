"""A real one-device run trained in the background (as ``%dtrain`` does) is served by the
extension: listed, finished with its summary, its charts and its exports."""

from __future__ import annotations

import csv
import io
import json

import pytest

from workbench.config import RunConfig
from workbench.launch.background_run import BackgroundRun
from workbench.server import RunsManager

pytestmark = pytest.mark.integration


def test_a_finished_notebook_run_is_served_from_the_store(store_root):
    config = RunConfig(strategy="one-device", steps=4, hidden=(16,), batch_size=32)
    run = BackgroundRun(config).wait(120)
    manager = RunsManager()

    (record,) = manager.runs()
    assert record["id"] == run.run_id and record["state"] == "finished"
    assert record["strategy"] == "one-device" and record["step"] == 4 and record["steps"] == 4
    assert record["samples_per_second"] == run.summary["samples_per_second"]
    assert manager.run(run.run_id)["summary"]["test_accuracy"] == run.summary["test_accuracy"]
    assert manager.clusters() == []  # one device: no Dask cluster

    charts = manager.chart_data(run.run_id, "loss")
    assert charts["state"] == "finished" and charts["sources"]["loss"]["step"] == [0, 1, 2, 3]
    assert len(charts["sources"]["test_loss"]["value"]) == 1  # evaluated once, at the end
    json.dumps(charts, allow_nan=False)
    rows = list(csv.DictReader(io.StringIO(manager.scalars_csv(run.run_id))))
    assert [int(row["step"]) for row in rows if row["name"] == "loss"] == [0, 1, 2, 3]
    phases = [e for e in json.loads(manager.trace(run.run_id))["traceEvents"] if e["ph"] == "X"]
    assert {event["name"] for event in phases} >= {"compute"}
