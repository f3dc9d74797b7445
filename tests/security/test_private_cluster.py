"""A cluster the workbench starts is private to its user: its dashboard (Dask's pages, Bokeh's
websockets and files, the workbench's pages, /json, /metrics) answers only requests carrying
the token of the link the workbench shows, and its scratch directory is a private one of its
own, never a shared name another user made first, removed when the cluster closes (or by the
stale sweep once its owner is killed)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import dask
import pytest
from bokeh.client import pull_session

from tests.security.conftest import made_by_a_killed_process
from workbench.dashboard import scheduler_options
from workbench.runtime.cluster import start_cluster

pytestmark = pytest.mark.integration

# One path of each family the dashboard server answers.
PAGES = (
    "/status",  # a Dask page (a Bokeh document)
    "/individual-workbench-loss",  # a workbench page
    "/json/identity.json",  # the scheduler's state as JSON
    "/individual-plots.json",
    "/metrics",
    "/health",
    "/static/js/bokeh.min.js",  # Bokeh's files
    "/statics/images/dask-logo.svg",  # Dask's files
)
WEBSOCKETS = ("/status/ws", "/individual-workbench-loss/ws")

# Run as this user and as the other one: what each request gets (status, start of the body).
PROBE = """
import http.client, json, urllib.error, urllib.request

def probe(base, host, port, query, headers):
    answers = {}
    for path in PAGES:
        request = urllib.request.Request(base + path + query, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                answers[path] = [response.status, response.read(40).decode("latin-1")]
        except urllib.error.HTTPError as error:
            answers[path] = [error.code, error.read(40).decode("latin-1")]
    for path in WEBSOCKETS:
        connection = http.client.HTTPConnection(host, port, timeout=10)
        connection.request("GET", path + query, headers={
            **headers,
            "Upgrade": "websocket",
            "Connection": "Upgrade",
            "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
            "Sec-WebSocket-Version": "13",
            "Sec-WebSocket-Protocol": "bokeh",
            "Origin": base,
        })
        response = connection.getresponse()
        answers[path] = [response.status, "" if response.status == 101 else
                         response.read(40).decode("latin-1")]
        connection.close()
    return answers
"""


class Dashboard:
    def __init__(self, link: str) -> None:
        parts = urlsplit(link)
        self.link = link
        self.host, self.port = parts.hostname, parts.port
        self.base = f"http://{parts.netloc}"
        self.token = (parse_qs(parts.query).get("token") or [""])[0]

    def source(self, query: str = "", headers: dict | None = None) -> str:
        arguments = (self.base, self.host, self.port, query, headers or {})
        return (
            f"PAGES, WEBSOCKETS = {PAGES!r}, {WEBSOCKETS!r}\n{PROBE}\n"
            f"print(json.dumps(probe(*{arguments!r})))\n"
        )

    def answers(self, query: str = "", headers: dict | None = None) -> dict:
        """What this user gets."""
        done = subprocess.run(
            [sys.executable, "-c", self.source(query, headers)], capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)


def _refused(answers: dict) -> None:
    assert set(answers) == {*PAGES, *WEBSOCKETS}
    for path, (status, body) in answers.items():
        assert status == 403, (path, status, body)
        assert body.startswith("403: this dashboard answers only"), (path, body)


@pytest.fixture(scope="module")
def dashboard():
    with start_cluster(1, "cpu", scheduler_options=scheduler_options()) as session:
        yield Dashboard(session.dashboard_link)


def test_the_link_shown_to_the_user_is_on_loopback_with_a_token(dashboard):
    assert dashboard.host == "127.0.0.1"
    assert urlsplit(dashboard.link).path == "/status"
    assert len(dashboard.token) >= 32


def test_another_user_gets_403_from_every_route(dashboard, other_user):
    for query, headers in [
        ("", {}),
        ("?token=not-the-token", {}),
        ("", {"Cookie": f"dtrain-dashboard-{dashboard.port}=not-the-token"}),
    ]:
        probed = other_user.python(dashboard.source(query, headers))
        assert probed.returncode == 0, probed.stderr
        _refused(json.loads(probed.stdout))


def test_the_same_user_without_the_token_gets_403(dashboard):
    _refused(dashboard.answers())
    _refused(dashboard.answers("?token=" + "x" * len(dashboard.token)))


def test_the_link_opens_every_route_and_sets_a_private_cookie(dashboard):
    with_token = dashboard.answers(f"?token={dashboard.token}")
    assert all(with_token[path][0] == 200 for path in PAGES), with_token
    assert all(with_token[path][0] == 101 for path in WEBSOCKETS), with_token

    with urllib.request.urlopen(dashboard.link, timeout=10) as response:
        (cookie,) = response.headers.get_all("Set-Cookie")
    name_value, *attributes = [part.strip() for part in cookie.split(";")]
    assert name_value == f"dtrain-dashboard-{dashboard.port}={dashboard.token}"
    assert {"HttpOnly", "SameSite=Strict", "Path=/"} <= set(attributes)
    assert not [attribute for attribute in attributes if attribute.startswith("Domain")]

    # The cookie alone opens the pages, their files and websockets (what a browser sends).
    with_cookie = dashboard.answers(headers={"Cookie": name_value})
    assert all(with_cookie[path][0] == 200 for path in PAGES), with_cookie
    assert all(with_cookie[path][0] == 101 for path in WEBSOCKETS), with_cookie


def test_a_bokeh_session_opens_with_the_token(dashboard):
    with pull_session(
        url=f"{dashboard.base}/individual-workbench-loss", arguments={"token": dashboard.token}
    ) as session:
        assert session.document.roots


@contextlib.contextmanager
def _shared_temporary_directory():
    """A directory every user may create in (like /tmp), made Dask's temporary directory."""
    shared = Path(tempfile.mkdtemp(prefix="dtrain-shared-tmp-"))
    try:
        shared.chmod(0o1777)
        with dask.config.set({"temporary-directory": str(shared)}):
            yield shared
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def _plant(other_user, paths: list[Path]) -> None:
    planted = other_user.python(
        "import os\n"
        f"for path in {[str(path) for path in paths]!r}:\n"
        "    os.mkdir(path)\n"
        "    os.chmod(path, 0o777)\n"
    )
    assert planted.returncode == 0, planted.stderr


@pytest.mark.parametrize("device_type", ["cpu", "gpu"])
def test_scratch_is_private_never_a_planted_directory_and_removed_on_close(
    device_type, other_user, request
):
    if device_type == "gpu":  # GPU clusters start through the GPU runtime's own hook
        request.getfixturevalue("cpu_double_gpus")
    with _shared_temporary_directory() as shared:
        # Dask's default names, made first by another user.
        planted = [shared / "dask-scratch-space", shared / f"dask-scratch-space-{os.geteuid()}"]
        _plant(other_user, planted)
        with start_cluster(1, device_type) as session:
            assert session.device_type == device_type
            used = list(
                session.client.run(lambda dask_worker: dask_worker.local_directory).values()
            )
            used.append(
                session.client.run_on_scheduler(
                    lambda dask_scheduler: dask_scheduler.local_directory
                )
            )
            tops = {shared / Path(path).relative_to(shared).parts[0] for path in used}
            assert not tops & set(planted), used
            (top,) = tops
            status = top.lstat()
            assert stat.S_ISDIR(status.st_mode) and status.st_uid == os.geteuid()
            assert stat.S_IMODE(status.st_mode) == 0o700
            # Its dashboard, too, answers the link only.
            dashboard = Dashboard(session.dashboard_link)
            assert dashboard.host == "127.0.0.1" and dashboard.token
            urllib.request.urlopen(dashboard.link, timeout=10).close()
            with pytest.raises(urllib.error.HTTPError, match="403"):
                urllib.request.urlopen(f"{dashboard.base}/status", timeout=10)
        assert not top.exists()
        for path in planted:
            assert not os.listdir(path), f"the cluster wrote into {path}, planted by another user"


def _killed_owner() -> str:
    """The scratch directory of a process killed with SIGKILL."""
    from workbench.runtime.scratch import make_scratch_directory

    kept = []  # the directory lives as long as its object: until the child is killed

    def make() -> str:
        kept.append(make_scratch_directory())
        return kept[-1].path

    return made_by_a_killed_process(make)


def test_the_stale_sweep_removes_a_dead_owners_directory_and_keeps_live_and_foreign_ones(
    other_user,
):
    from workbench.runtime.scratch import (
        PREFIX,
        make_scratch_directory,
        sweep_stale_scratch_directories,
    )

    with _shared_temporary_directory() as shared:
        dead = _killed_owner()
        assert Path(dead).parent == shared and Path(dead).is_dir()
        live = make_scratch_directory()
        # Another user's directory with the same prefix, and a link to one of this user's.
        theirs = shared / f"{PREFIX}theirs"
        _plant(other_user, [theirs])
        victim = Path(tempfile.mkdtemp(dir=shared))
        link = other_user.python(f"import os; os.symlink({str(victim)!r}, {str(theirs)!r} + '-x')")
        assert link.returncode == 0, link.stderr
        # Old enough that a directory of this user's without a lock would count as stale.
        for path in (theirs, victim):
            os.utime(path, (1.0, 1.0))
        try:
            assert sweep_stale_scratch_directories() == [dead]
            assert not Path(dead).exists()
            assert Path(live.path).is_dir()
            assert theirs.is_dir() and victim.is_dir()
        finally:
            live.close()
        assert not Path(live.path).exists()
