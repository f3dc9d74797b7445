"""The live panel keeps up with its run and survives a reload: its step text, bar and status
show one step, refreshed several times a second however slow the charts are, and the charts
draw the whole run as soon as it ends however far they had backed off; it says finished
as soon as the last step is in (not once the cluster has closed), hides the dead dashboard link
and disables Stop; the ETA comes from the recent step rate; a view made after the run (the
notebook reloaded) receives every chart's rows; the form's defaults start for every strategy."""

from __future__ import annotations

import base64
import json
import threading
import time
from types import SimpleNamespace

import pytest

from workbench.charts.live_charts import LiveCharts
from workbench.config import RunConfig
from workbench.events import EventLog
from workbench.events.records import ScalarEvent
from workbench.launch.background_run import BackgroundRun
from workbench.launch.flags import parse_run_flags
from workbench.notebook.panel import RunPanel, TrainingForm
from workbench.store import RunStore
from workbench.strategies import STRATEGIES


class StandInRun(SimpleNamespace):
    """What the panel reads of a BackgroundRun; the test moves it along."""

    def __init__(self, **changes) -> None:
        fields = dict(
            run_id="run-1",
            log=EventLog(),
            config=SimpleNamespace(batch_size=32),
            total_steps=300,
            first_step=0,
            steps_per_epoch=44,
            step=0,
            started=time.time(),
            state="running",
            error=None,
            summary=None,
            lines=["[mirrored] epoch 1/7  step 44/300  loss 0.4944"],
            job=SimpleNamespace(stop=threading.Event()),
            dashboard_link="http://127.0.0.1:8787/status",
            test_result=None,
            done=False,
            trained_at=None,
            eta_seconds=lambda: None,
            stop=lambda: None,
        )
        super().__init__(**{**fields, **changes})


@pytest.fixture
def panel_of():
    made: list[RunPanel] = []

    def make(run: StandInRun) -> RunPanel:
        made.append(RunPanel(run))
        return made[-1]

    yield make
    for panel in made:
        panel.run.done = True
        panel.updater.close()


def wait_for(condition, timeout: float) -> float:
    """Seconds until ``condition()`` held; fails after ``timeout``."""
    started = time.monotonic()
    while not condition():
        assert time.monotonic() - started < timeout, "not within the time allowed"
        time.sleep(0.01)
    return time.monotonic() - started


def test_the_step_shows_within_a_quarter_second_however_slow_the_charts_are(panel_of, monkeypatch):
    slow = LiveCharts.refresh

    def costly(self) -> None:  # a refresh this costly backs the charts off to one in 25 s
        time.sleep(0.5)
        slow(self)

    monkeypatch.setattr(LiveCharts, "refresh", costly)
    run = StandInRun()
    panel = panel_of(run)
    for step in (150, 151, 152):
        run.step = step
        lag = wait_for(lambda s=step: panel.progress_text.value.startswith(f"step {s}/"), 1.5)
        assert lag < 0.25
        # One step everywhere: the bar, and no other step count in the status line.
        assert panel.progress.value == step
        assert panel.status.value == "running"


def test_the_charts_draw_the_whole_run_as_soon_as_it_ends(panel_of, monkeypatch):
    slow = LiveCharts.refresh

    def costly(self) -> None:  # backs the charts off to one refresh in 25 s
        time.sleep(0.5)
        slow(self)

    monkeypatch.setattr(LiveCharts, "refresh", costly)
    run = StandInRun()
    panel = panel_of(run)
    time.sleep(0.7)  # the first refresh is done: the charts wait out their back-off
    run.log.emit(ScalarEvent("loss", 0, 2.0, 1.0))
    run.done, run.state, run.summary = True, "finished", {"test_accuracy": 0.9}
    panel.updater.join(2.0)
    assert not panel.updater._thread.is_alive()
    assert list(panel.charts.sources["loss"].data["step"]) == [0]


def test_finished_shows_with_the_last_step_while_the_cluster_closes(panel_of):
    run = StandInRun(step=120)
    panel = panel_of(run)
    wait_for(lambda: "Dask dashboard" in panel.dashboard.value, 1.0)
    assert not panel.stop_button.disabled
    run.step = 300  # the last step is in; evaluating, closing the cluster and done come after
    lag = wait_for(lambda: "finished" in panel.status.value, 1.0)
    assert lag < 0.25
    assert panel.status.value == "<b>finished</b> at step 300 (evaluating, closing the cluster)"
    assert panel.stop_button.disabled and panel.stop_button.description == "finished"
    assert panel.dashboard.value == ""  # its cluster is closing
    run.test_result = (0.12, 0.9639)
    run.trained_at = time.time()
    wait_for(lambda: "0.9639" in panel.status.value, 1.0)
    assert panel.status.value.endswith("test accuracy 0.9639 (closing the cluster)")


def test_a_run_stopped_early_says_so_once_its_test_point_is_logged(panel_of):
    run = StandInRun(step=120)
    panel = panel_of(run)
    run.job.stop.set()
    run.test_result = (0.3, 0.8)
    run.trained_at = time.time()
    wait_for(lambda: "stopped" in panel.status.value, 1.0)
    assert panel.status.value.startswith("<b>stopped</b> at step 120: test accuracy 0.8000")


def test_the_eta_comes_from_the_recent_step_rate(store_root):
    run = BackgroundRun(
        RunConfig(steps=1000, hidden=(16,)), store=RunStore(store_root), begin=False
    )
    # The first step came 8 s after the start (the cluster), the next 20 (the warm-up) slowly,
    # then 100 a second: 880 steps left at 100 a second.
    run.log.emit(ScalarEvent("loss", 0, 2.3, 8.0))
    for step in range(1, 21):
        run.log.emit(ScalarEvent("loss", step, 2.0, 8.0 + step * 0.1))
    for step in range(21, 120):
        run.log.emit(ScalarEvent("loss", step, 1.0, 10.0 + (step - 20) * 0.01))
    assert run.step == 120
    assert run.eta_seconds() == pytest.approx(8.8, rel=0.02)
    run.log.emit(ScalarEvent("test_accuracy", 119, 0.9, 12.0))
    assert run.trained_at is not None and run.eta_seconds() is None


def rows_in_bundle(render_bundle: str) -> dict[str, int]:
    """Rows of each named ColumnDataSource in what a new frontend view receives."""
    rows: dict[str, int] = {}

    def length(column) -> int:
        if isinstance(column, list):
            return len(column)
        if column.get("type") == "ndarray":
            if "shape" in column:
                return column["shape"][0]
            data = column["array"]
            return len(data) if isinstance(data, list) else len(base64.b64decode(data["data"]))
        return 0

    def walk(node) -> None:
        if isinstance(node, dict):
            attributes = node.get("attributes", {})
            if node.get("name") == "ColumnDataSource" and "name" in attributes:
                entries = attributes.get("data", {}).get("entries", [])
                rows[attributes["name"]] = max((length(c) for _, c in entries), default=0)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(json.loads(render_bundle))
    return rows


@pytest.mark.integration
def test_a_view_made_after_the_run_receives_every_charts_rows(shell):
    run = shell.run_line_magic("dtrain", "--steps 8 --hidden 16")
    panel = run.panel()
    run.wait(120)
    panel.updater.join(30)
    chart_view = panel.widget.children[-1]
    # What ipywidgets sends a new view (request_state / request_states): the whole state.
    received = rows_in_bundle(chart_view.get_state()["render_bundle"])
    held = {name: len(next(iter(s.data.values()), [])) for name, s in panel.charts.sources.items()}
    assert received["loss"] == 8 and received["timeline"] > 0
    assert received == held


def test_every_strategys_defaults_pass_the_flag_parser():
    form = TrainingForm(lambda flags: None)
    for name in STRATEGIES.names():
        form.fields["--strategy"].value = name
        parse_run_flags(form.flags())  # raises on a refused default
    form.fields["--strategy"].value = "pipeline"
    assert form.fields["--devices"].value == "2"
    form.fields["--stages"].value = "3"
    assert form.fields["--devices"].value == "3"  # devices follow the stages


def test_the_forms_stop_is_usable_only_while_its_run_runs(panel_of):
    run = StandInRun()
    run.panel = lambda: panel_of(run)
    form = TrainingForm(lambda flags: run)
    assert form.stop_button.disabled
    form.start()
    assert not form.stop_button.disabled
    run.done, run.state, run.summary = True, "finished", {"test_accuracy": 0.9}
    wait_for(lambda: form.stop_button.disabled, 1.0)
