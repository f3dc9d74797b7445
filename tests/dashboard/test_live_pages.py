"""Real runs on real clusters: while a run trains, the scheduler's dashboard lists and serves
the workbench's pages, and they show that run (fetched over plain HTTP and a Bokeh session)."""

import contextlib
import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import dask
import pytest
from bokeh.client import pull_session
from distributed import Client, LocalCluster, Scheduler
from distributed.core import Status

from workbench import RunConfig, run_training
from workbench.dashboard import PRELOAD, scheduler_options
from workbench.dashboard.handlers import LIST_RUNS, board_of
from workbench.dashboard.preload import PAGE_FIGURES
from workbench.launch.background_run import BackgroundRun

DEADLINE_S = 30
FLAGS = {"strategy": "mirrored", "devices": 2, "hidden": (16,)}


class LiveRun:
    """A run recorded in the run store and trained in the background, as the notebook starts
    one: long enough to look at, stopped on demand."""

    def __init__(self, **flags) -> None:
        self.lines: list[str] = []
        self.background = BackgroundRun(RunConfig(**flags), progress=self.lines.append)
        self.run_id = self.background.run_id  # what the sidebar, the panel and the CLI show

    def link(self) -> str:
        """The dashboard link the run shows, once its cluster has started."""
        deadline = time.monotonic() + DEADLINE_S
        while not self.background.dashboard_link:
            assert self.background.error is None, self.background.error
            assert time.monotonic() < deadline, f"no dashboard link: {self.lines}"
            time.sleep(0.05)
        return self.background.dashboard_link

    def dashboard(self) -> str:
        """The run's dashboard as ``http://host:port``."""
        parts = urlsplit(self.link())
        return f"{parts.scheme}://{parts.netloc}"

    def stop(self):
        self.background.stop()
        return self.background.wait(DEADLINE_S).result


def wait_for_events(runs_on_scheduler) -> dict:
    """The scheduler's run summary once it holds events of a run (polled)."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        runs = runs_on_scheduler()
        if any(run["received"] > 0 for run in runs.values()):
            return runs
        assert time.monotonic() < deadline, "the scheduler got no events of the run"
        time.sleep(0.1)


def runs_on(client: Client) -> dict:
    """The runs the scheduler's board holds, through the handler the preload installed."""
    return client.sync(lambda: getattr(client.scheduler, LIST_RUNS)())


def check_pages(dashboard: str, run_id: str, token: str | None = None) -> None:
    """The pages, fetched as the link shows them (with the token of a cluster the workbench
    started, whose dashboard answers nothing else), and the loss page of run ``run_id``, the
    id the run store gave it, as ``?run=`` names it."""
    query = f"?token={token}" if token else ""
    arguments = {"token": token} if token else {}
    listed = json.load(
        urllib.request.urlopen(f"{dashboard}/individual-plots.json{query}", timeout=10)
    )
    assert set(PAGE_FIGURES) <= set(listed.values())
    for path in PAGE_FIGURES:
        with urllib.request.urlopen(f"{dashboard}{path}{query}", timeout=10) as response:
            assert response.status == 200
    # A real Bokeh session on the run's loss page: its name, how far it is, its loss curve.
    page = f"{dashboard}/individual-workbench-loss"
    with pull_session(url=page, arguments={**arguments, "run": run_id}) as session:
        (root,) = session.document.roots
        step_line, *charts = root.children
        assert re.fullmatch(r"step [1-9]\d*/100000", step_line.text), step_line.text
        titles = [chart.title.text for chart in charts]
        assert titles[0] == f"loss — mirrored, 2 devices, run {run_id} (live)", titles
        losses = [
            model.data["loss"]
            for model in session.document.models
            if type(model).__name__ == "ColumnDataSource" and "loss" in model.data
        ]
        assert losses and len(losses[0]) > 0


@pytest.mark.integration
def test_the_workbench_cluster_serves_the_pages_of_a_live_run(no_leftover_processes):
    run = LiveRun(steps=100_000, **FLAGS)
    try:
        dashboard = run.dashboard()
        port = urlsplit(dashboard).port
        # The workbench's LocalCluster runs its scheduler in this process; a closed one of an
        # earlier test may linger in the weak set on the same, reused port.
        (scheduler,) = [
            s
            for s in Scheduler._instances
            if s.http_server.port == port and s.status == Status.running
        ]
        board = board_of(scheduler)
        assert board is not None, "the workbench's scheduler has no run board"
        runs = wait_for_events(board.summary)
        assert list(runs) == [run.run_id]  # the board knows the run by its run store id
        (token,) = parse_qs(urlsplit(run.link()).query)["token"]
        check_pages(dashboard, run.run_id, token)
        for path in ("/individual-plots.json", *PAGE_FIGURES):
            with pytest.raises(urllib.error.HTTPError, match="403"):
                urllib.request.urlopen(f"{dashboard}{path}", timeout=10)
        (description,) = [run["description"] for run in runs.values()]
        assert description["strategy"] == "mirrored"
        assert len(description["devices"]) == 2
        assert description["batch_size"] == RunConfig().batch_size
    finally:
        result = run.stop()
    assert 0 < result.summary["steps"] < 100_000
    # The end of the run reached the board: every event sent, the run marked finished.
    (finished,) = board.summary().values()
    assert finished["finished"]
    assert finished["received"] > 0
    assert not [line for line in run.lines if "dashboard pages off" in line]


def start_process(command: list[str], log: Path) -> subprocess.Popen:
    with log.open("wb") as output:  # the child keeps its own handle
        return subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)


@pytest.fixture
def preloaded_scheduler(tmp_path: Path):
    """``dask scheduler --preload workbench.dashboard.preload`` and two ``dask worker``
    processes, as a user starts them; yields (scheduler address, dashboard URL)."""
    dask_command = str(Path(sys.executable).with_name("dask"))
    scheduler_file = tmp_path / "scheduler.json"
    started = [
        start_process(
            [
                *(dask_command, "scheduler", "--preload", PRELOAD),
                *("--host", "127.0.0.1", "--port", "0", "--dashboard-address", "127.0.0.1:0"),
                *("--scheduler-file", str(scheduler_file)),
            ],
            tmp_path / "scheduler.log",
        )
    ]
    address = None
    try:
        deadline = time.monotonic() + DEADLINE_S
        while address is None:
            assert time.monotonic() < deadline, (tmp_path / "scheduler.log").read_text()
            time.sleep(0.1)
            with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
                identity = json.loads(scheduler_file.read_text())
                address, dashboard_port = identity["address"], identity["services"]["dashboard"]
        started.append(
            start_process(
                [
                    *(dask_command, "worker", address, "--nworkers", "2", "--nthreads", "1"),
                    *("--host", "127.0.0.1", "--no-dashboard", "--memory-limit", "0"),
                ],
                tmp_path / "workers.log",
            )
        )
        with Client(address, timeout=DEADLINE_S) as client:
            client.wait_for_workers(2, timeout=DEADLINE_S)
        yield address, f"http://127.0.0.1:{dashboard_port}"
    finally:
        if address is not None:
            # Through the scheduler, as a user ends a cluster: every worker closes its device
            # service (dropping what runs left on it) and the processes exit on their own.
            with contextlib.suppress(Exception), Client(address, timeout=10) as client:
                client.shutdown()
        for process in started:
            try:
                process.wait(DEADLINE_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@pytest.mark.integration
def test_an_existing_scheduler_started_with_the_preload_serves_the_pages(
    no_leftover_processes, preloaded_scheduler
):
    address, dashboard = preloaded_scheduler
    with urllib.request.urlopen(f"{dashboard}/individual-workbench-loss", timeout=10) as page:
        assert page.status == 200  # before any run: an empty chart that says so
    with Client(address, timeout=DEADLINE_S) as client:
        assert runs_on(client) == {}
        run = LiveRun(steps=100_000, cluster=address, **FLAGS)
        try:
            runs = wait_for_events(lambda: runs_on(client))
            assert run.dashboard() == dashboard  # the link the run panel shows
            assert list(runs) == [run.run_id]
            check_pages(dashboard, run.run_id)
            (description,) = [run["description"] for run in runs.values()]
            assert description["strategy"] == "mirrored"
        finally:
            result = run.stop()
        ((run_id, finished),) = runs_on(client).items()
        assert run_id == run.run_id and finished["finished"]
    # The finished run, on a page pinned to it: its test loss reached the board before the
    # run let go of the cluster.
    page = f"{dashboard}/individual-workbench-loss"
    with pull_session(url=page, arguments={"run": run_id}) as session:
        (test_loss,) = [
            model
            for model in session.document.models
            if type(model).__name__ == "ColumnDataSource" and model.name == "test_loss"
        ]
        assert len(test_loss.data["value"]) == 1
        assert test_loss.data["value"][0] == pytest.approx(result.summary["test_loss"])
        (root,) = session.document.roots
        assert root.children[1].title.text.endswith(f"run {run_id} (finished)")


@pytest.fixture
def cluster_without_preload():
    cluster = LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
    )
    yield cluster
    cluster.close()


@pytest.mark.integration
def test_a_scheduler_without_the_preload_costs_one_warning_and_nothing_else(
    cluster_without_preload, no_leftover_processes
):
    config = RunConfig(steps=30, cluster=cluster_without_preload.scheduler_address, **FLAGS)
    lines: list[str] = []
    result = run_training(config, progress=lines.append)
    assert result.summary["steps"] == 30
    warnings = [line for line in lines if "dashboard pages off" in line]
    assert len(warnings) == 1, lines
    assert f"--preload {PRELOAD}" in warnings[0]


def test_clusters_the_workbench_starts_keep_the_users_preloads():
    assert scheduler_options() == {"preload": [PRELOAD]}
    configured = {
        "distributed.scheduler.preload": ["my.preload"],
        "distributed.scheduler.preload-argv": [["--flag"]],
    }
    with dask.config.set(configured):
        assert scheduler_options() == {
            "preload": ["my.preload", PRELOAD],
            "preload_argv": [["--flag"], []],
        }
    with dask.config.set({"distributed.scheduler.preload": [PRELOAD]}):
        assert scheduler_options() == {}
