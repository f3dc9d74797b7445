"""A reloaded page draws the panel's charts from the kernel's document: the browser's view
sends back every change it makes to its own document, the patches it has just received
included, and none of that may reach the kernel's rows (docs/jupyterlab.md, "Notebook panel")."""

from __future__ import annotations

import base64
import gzip
import json
import math
import threading
import time
from types import SimpleNamespace

import numpy as np

from tests.notebook.test_panel_live import StandInRun
from workbench.events import EventLog
from workbench.events.records import ScalarEvent
from workbench.notebook.panel import RunPanel


def finished_run(log: EventLog) -> StandInRun:
    """What the panel reads of a run that has ended (its updaters stop at once)."""
    return StandInRun(
        log=log,
        total_steps=5,
        steps_per_epoch=5,
        step=5,
        state="finished",
        summary={"test_accuracy": 0.9, "samples_per_second": 100.0},
        lines=[],
        job=SimpleNamespace(stop=threading.Event()),
        dashboard_link=None,
        test_result=None,
        done=True,
        trained_at=time.time(),
    )


def browser_message(event: dict) -> dict:
    """A document event as jupyter_bokeh's view sends it to the kernel."""
    return {
        "content": {"data": {"method": "custom", "content": {**event, "event": "jsevent"}}},
        "buffers": [],
    }


def loss_steps_in_bundle(render_bundle: str) -> list[int]:
    """The loss source's steps in what a new view receives (rows as lists or base64)."""
    found: list[list[int]] = []

    def walk(node) -> None:
        if isinstance(node, dict):
            if (
                node.get("name") == "ColumnDataSource"
                and node.get("attributes", {}).get("name") == "loss"
            ):
                entries = dict(node["attributes"]["data"]["entries"])
                found.append(entries["step"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(json.loads(render_bundle))
    (steps,) = found
    return steps if isinstance(steps, list) else _decoded(steps)


def _decoded(column: dict) -> list[int]:
    raw = base64.b64decode(column["array"]["data"])
    raw = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw  # Bokeh gzips long columns
    return np.frombuffer(raw, dtype=column["dtype"]).tolist()


def test_the_browsers_echo_of_streamed_rows_leaves_the_kernels_rows_once():
    log = EventLog()
    panel = RunPanel(finished_run(log))
    panel.updater.join(5)
    chart_view = panel.widget.children[-1]
    for step in range(5):
        log.emit(ScalarEvent("loss", step, 2.0 - step / 10, float(step)))
    panel.refresh_charts()  # streams the 5 rows to the views
    source = panel.charts.sources["loss"]
    rows = {name: list(map(float, column)) for name, column in source.data.items()}
    # The view applies the patch, then sends the same rows back as its own stream, and the
    # ranges it fitted to them.
    streamed = {"type": "map", "entries": list(rows.items())}
    chart_view._handle_msg(
        browser_message(
            {
                "kind": "ColumnsStreamed",
                "model": {"id": source.id},
                "attr": "data",
                "data": streamed,
                "rollover": None,
            }
        )
    )
    x_range = panel.charts.figures["loss"].x_range
    chart_view._handle_msg(
        browser_message(
            {"kind": "ModelChanged", "model": {"id": x_range.id}, "attr": "start", "new": -0.2}
        )
    )
    assert list(source.data["step"]) == [0, 1, 2, 3, 4]
    assert math.isnan(x_range.start)  # unset: the next view fits its own range to the rows
    # A view made now (a reload) receives each row once.
    assert loss_steps_in_bundle(chart_view.get_state()["render_bundle"]) == [0, 1, 2, 3, 4]
