"""Every endpoint through a real Jupyter server with the extension enabled, token-authenticated
(``jp_fetch`` sends the token): statuses, bodies and the JSON errors."""

from __future__ import annotations

import json
import re

import pytest
from tornado.httpclient import HTTPClientError

from workbench.server import MANAGER_SETTING, RunsManager
from workbench.store import RunStore


async def fetch_json(jp_fetch, *parts, **options):
    response = await jp_fetch("workbench", *parts, **options)
    return response.code, json.loads(response.body)


async def fetch_error(jp_fetch, *parts, **options):
    with pytest.raises(HTTPClientError) as raised:
        await jp_fetch("workbench", *parts, **options)
    response = raised.value.response
    assert response.headers["Content-Type"].startswith("application/json")
    return response.code, json.loads(response.body)["message"]


async def test_the_extension_loads_with_a_manager_over_the_test_store(jp_serverapp, store_root):
    manager = jp_serverapp.web_app.settings[MANAGER_SETTING]
    assert isinstance(manager, RunsManager) and manager.store.root == store_root


async def test_run_list_and_one_run(jp_fetch, runs):
    runs.run("old", started=1.0)
    runs.run("new", started=2.0, state=None, recorded=1)
    code, body = await fetch_json(jp_fetch, "api", "runs")
    assert code == 200 and [record["id"] for record in body["runs"]] == ["new", "old"]
    code, body = await fetch_json(jp_fetch, "api", "runs", "old")
    assert code == 200 and body["state"] == "finished" and body["summary"]["steps"] == 4
    assert body["config"]["strategy"] == "mirrored"
    assert await fetch_error(jp_fetch, "api", "runs", "gone") == (
        404,
        "no run 'gone' in the run store",
    )


async def test_stop_accepts_a_running_run_and_refuses_others(jp_fetch, runs, store_root):
    runs.run("live", state=None, recorded=1)
    runs.run("done")
    code, body = await fetch_json(jp_fetch, "api", "runs", "live", "stop", method="POST", body="")
    assert code == 202 and body["state"] == "stopping" and body["id"] == "live"
    assert RunStore(store_root).open("live").stop_requested()
    code, message = await fetch_error(
        jp_fetch, "api", "runs", "done", "stop", method="POST", body=""
    )
    assert code == 409 and "finished" in message
    code, message = await fetch_error(
        jp_fetch, "api", "runs", "gone", "stop", method="POST", body=""
    )
    assert code == 404 and "'gone'" in message


async def test_clusters(jp_fetch, runs):
    runs.run("a", state=None, scheduler_address="tcp://s:8786", dashboard_link="http://s:8787")
    code, body = await fetch_json(jp_fetch, "api", "clusters")
    assert code == 200 and body == {
        "clusters": [{"address": "tcp://s:8786", "dashboard_link": "http://s:8787", "runs": ["a"]}]
    }


async def test_chart_data_reads_new_events_on_each_request(jp_fetch, runs):
    recorder = runs.run("live", state=None, recorded=2)
    code, body = await fetch_json(jp_fetch, "api", "runs", "live", "charts", "loss")
    assert code == 200 and body["state"] == "running"
    assert body["sources"]["loss"]["step"] == [0, 1]
    runs.record(recorder, 2)
    _, body = await fetch_json(jp_fetch, "api", "runs", "live", "charts", "loss")
    assert body["sources"]["loss"]["step"] == [0, 1, 2]
    code, message = await fetch_error(jp_fetch, "api", "runs", "live", "charts", "weights")
    assert code == 404 and "loss, utilization, timeline, communication" in message
    code, message = await fetch_error(jp_fetch, "api", "runs", "gone", "charts", "loss")
    assert code == 404 and "'gone'" in message


async def test_trace_and_csv_downloads(jp_fetch, runs):
    runs.run("done", steps=2)
    response = await jp_fetch("workbench", "api", "runs", "done", "trace")
    assert response.headers["Content-Type"].startswith("application/json")
    assert response.headers["Content-Disposition"] == 'attachment; filename="done-trace.json"'
    assert any(event["ph"] == "X" for event in json.loads(response.body)["traceEvents"])
    response = await jp_fetch("workbench", "api", "runs", "done", "scalars.csv")
    assert response.headers["Content-Type"].startswith("text/csv")
    assert response.body.decode().splitlines()[0] == "step,name,value,time,device"


async def test_a_chart_page_loads_bokehjs_from_the_extension_and_polls_its_data(
    jp_fetch, jp_base_url, runs
):
    runs.run("live", state=None, recorded=1)
    response = await jp_fetch("workbench", "runs", "live", "charts", "utilization")
    assert response.code == 200 and response.headers["Content-Type"].startswith("text/html")
    html, base = response.body.decode(), jp_base_url
    assert "<title>dtrain run live: utilization</title>" in html
    assert f"{jp_base_url}workbench/api/runs/live/charts/utilization" in html
    bokeh_js = re.findall(r'<script src="([^"]+)"', html)
    assert bokeh_js and all(src.startswith(f"{base}workbench/static/bokeh/js/") for src in bokeh_js)
    assert "cdn.bokeh.org" not in html and "https://" not in html.split("<body>")[0]
    # The figures the page's script finds by name, and the sources it fills.
    for name in ("figure:utilization", "figure:stragglers", '"utilization"', '"stragglers"'):
        assert name in html
    for src in bokeh_js:  # each one is served by the extension
        path = src.removeprefix(jp_base_url).split("?")[0]
        served = await jp_fetch(*path.split("/"))
        assert served.code == 200 and len(served.body) > 1000

    code, message = await fetch_error(jp_fetch, "runs", "live", "charts", "weights")
    assert code == 404 and "loss, utilization, timeline, communication" in message
    code, message = await fetch_error(jp_fetch, "runs", "gone", "charts", "loss")
    assert code == 404 and "'gone'" in message


async def test_a_path_out_of_the_store_is_not_a_run(jp_fetch, runs):
    runs.run("done")
    for run_id in ("..", "%2e%2e"):
        with pytest.raises(HTTPClientError) as raised:
            await jp_fetch("workbench", "api", "runs", run_id)
        assert raised.value.code == 404
    with pytest.raises(HTTPClientError) as raised:
        await jp_fetch("workbench", "static", "bokeh", "..", "__init__.py")
    assert raised.value.code in (403, 404)
