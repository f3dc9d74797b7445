"""The charts' device axes show short names: the browser-side formatter (run here with Node,
as BokehJS runs it) gives exactly what ``device_tag`` gives in Python."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from workbench.charts.live_charts import SHORT_DEVICE_NAME_JS, LiveCharts
from workbench.events import EventLog
from workbench.runtime.devices import device_tag

NAMES = [
    "/job:worker/task:0/device:CPU:0",
    "/job:worker/task:11/device:GPU:3",
    "/job:ps/task:1/device:CPU:0",
    "/job:chief/task:0/device:GPU:0",
    "/task:2",
    "not a device name",
]


@pytest.mark.integration
def test_the_browser_formatter_shortens_device_names_as_device_tag_does():
    node = shutil.which("node")
    if node is None:
        pytest.fail("no node on PATH: run ./setup.sh (it needs Node 20)", pytrace=False)
    script = (
        # BokehJS calls the body as a function of (tick, index, ticks).
        f"const format = (tick, index, ticks) => {{ {SHORT_DEVICE_NAME_JS} }};\n"
        f"console.log(JSON.stringify({json.dumps(NAMES)}.map(format)));"
    )
    shown = json.loads(
        subprocess.run(
            [node, "-e", script], capture_output=True, text=True, check=True, timeout=30
        ).stdout
    )
    expected = [device_tag(name) if "task:" in name else name for name in NAMES]
    assert shown == expected
    assert shown[:3] == ["task0-cpu0", "task11-gpu3", "ps-task1-cpu0"]


def test_every_device_axis_uses_the_short_name_formatter():
    charts = LiveCharts(EventLog(), batch_size=1)
    device_figures = ["utilization", "traffic", "timeline", "stragglers"]
    for name in device_figures:
        (axis,) = charts.figures[name].yaxis
        assert axis.formatter.code == SHORT_DEVICE_NAME_JS, name
