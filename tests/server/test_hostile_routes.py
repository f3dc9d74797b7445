"""The routes against runs that diverged, damaged run directories, ids that break the run-id
rule and another user's run: strict JSON, 200 for the lists, 404 and 403 as JSON errors."""

from __future__ import annotations

import json
import os

import pytest
from tornado.httpclient import HTTPClientError

from workbench.events.records import ScalarEvent


def strict_loads(body: bytes):
    def refuse(token: str):
        raise ValueError(f"non-standard JSON token {token}")

    return json.loads(body, parse_constant=refuse)


async def fetch_error(jp_fetch, *parts, **options):
    with pytest.raises(HTTPClientError) as raised:
        await jp_fetch("workbench", *parts, **options)
    response = raised.value.response
    assert response.headers["Content-Type"].startswith("application/json")
    return response.code, json.loads(response.body)["message"]


async def test_the_lists_answer_200_with_a_nan_run_and_a_damaged_run(jp_fetch, runs, store_root):
    runs.run("good", started=1.0)
    diverged = runs.run("diverged", started=2.0, state=None, recorded=1)
    diverged.record(ScalarEvent("loss", 1, float("nan"), 0.2))
    diverged.finish("finished", summary={"final_loss": float("inf")})
    runs.run("cut", started=3.0, recorded=1)
    status = store_root / "cut" / "status.json"
    status.write_text(status.read_text()[:30])

    response = await jp_fetch("workbench", "api", "runs")
    records = {record["id"]: record for record in strict_loads(response.body)["runs"]}
    assert response.code == 200 and set(records) == {"good", "diverged", "cut"}
    assert records["diverged"]["non_finite"] == ["loss"] and records["diverged"]["loss"] is None
    assert records["cut"]["state"] == "damaged" and "status.json" in records["cut"]["damage"]
    assert records["good"]["state"] == "finished" and records["good"]["damage"] is None

    response = await jp_fetch("workbench", "api", "clusters")
    assert response.code == 200 and strict_loads(response.body) == {"clusters": []}
    response = await jp_fetch("workbench", "api", "runs", "diverged")
    assert strict_loads(response.body)["summary"]["final_loss"] is None
    for part in ("trace", "charts/loss"):
        response = await jp_fetch("workbench", "api", "runs", "diverged", *part.split("/"))
        strict_loads(response.body)
    code, message = await fetch_error(jp_fetch, "api", "runs", "gone")
    assert code == 404 and "'gone'" in message
    code, message = await fetch_error(
        jp_fetch, "api", "runs", "cut", "stop", method="POST", body=""
    )
    assert code == 409 and "damaged" in message


async def test_an_over_long_or_escaping_id_is_404(jp_fetch, runs):
    runs.run("done")
    for run_id in ("a" * 5000, "..%2F..%2Fetc", ".hidden"):
        for parts in ((run_id,), (run_id, "trace"), (run_id, "charts", "loss")):
            code, message = await fetch_error(jp_fetch, "api", "runs", *parts)
            assert code == 404 and "no run" in message
        code, _ = await fetch_error(jp_fetch, "api", "runs", run_id, "stop", method="POST", body="")
        assert code == 404


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a run to another user needs root")
async def test_stopping_another_users_run_is_403(jp_fetch, runs, store_root):
    runs.run("theirs", state=None, recorded=1)
    os.chown(store_root / "theirs" / "status.json", 65534, 65534)  # nobody's
    code, message = await fetch_error(
        jp_fetch, "api", "runs", "theirs", "stop", method="POST", body=""
    )
    assert code == 403 and "cannot stop it" in message
    assert not (store_root / "theirs" / "stop-requested").exists()
