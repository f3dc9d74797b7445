"""The live panel's status line tells of a run's faults: the failure it is recovering from while
it runs, then its restarts and dropped pushes, and nothing for a run without faults. The run is a
stand-in holding an event log, so no training starts."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.fault_events import after_the_failure, before_the_failure, step
from workbench.events import EventLog
from workbench.events.records import PhaseEvent
from workbench.notebook.panel import RunPanel


class StandInRun(SimpleNamespace):
    """What the panel reads of a BackgroundRun, with a log the test fills."""

    def __init__(self, state: str) -> None:
        super().__init__(
            run_id="run-1",
            log=EventLog(),
            config=SimpleNamespace(batch_size=32),
            total_steps=10,
            first_step=0,
            steps_per_epoch=5,
            step=0,
            started=0.0,
            state=state,
            error=None,
            summary={"test_accuracy": 0.9, "samples_per_second": 1000.0},
            lines=["step 3/10"],
            job=SimpleNamespace(),
            dashboard_link=None,
            test_result=None,
            done=True,  # until the panel's updater has refreshed once and stopped
            trained_at=None,  # still training
            eta_seconds=lambda: None,
        )

    def emit(self, events) -> None:
        for event in events:
            self.log.emit(event)


@pytest.fixture
def panel_of():
    made: list[RunPanel] = []

    def make(run: StandInRun) -> RunPanel:
        panel = RunPanel(run)
        panel.updater.join(10)  # the test refreshes by hand from here on
        made.append(panel)
        return panel

    yield make
    for panel in made:
        panel.updater.close()


def test_a_running_run_shows_the_failure_then_its_restarts_and_dropped_pushes(panel_of):
    run = StandInRun("running")
    panel = panel_of(run)
    run.done = False
    run.emit(before_the_failure())
    panel.refresh()
    assert panel.status.value.startswith("running: step 3/10 · ")
    assert "failure noticed on task1-cpu0 at step 3" in panel.status.value
    run.emit(after_the_failure())
    panel.refresh()
    assert "failure noticed" not in panel.status.value
    assert panel.status.value.endswith(" · restarts 1 · dropped 1")


def test_a_failure_no_device_is_blamed_for_is_the_clusters(panel_of):
    run = StandInRun("running")
    panel = panel_of(run)
    run.done = False
    run.emit([PhaseEvent("cluster", "failure", 7, 9.0, 9.0)])
    panel.refresh()
    assert "failure noticed on cluster at step 7" in panel.status.value


def test_a_finished_run_keeps_its_fault_counts_in_its_status(panel_of):
    run = StandInRun("finished")
    run.emit(before_the_failure() + after_the_failure())
    panel = panel_of(run)
    panel.refresh()
    assert panel.status.value == (
        "<b>finished</b>: test accuracy 0.9000, 1,000 samples/s · restarts 1 · dropped 1"
    )


def test_a_run_that_failed_after_a_failure_says_why_not_that_it_is_recovering(panel_of):
    run = StandInRun("failed")
    run.error = RuntimeError("device /task:1 lost, no restarts left")
    run.emit(before_the_failure())
    panel = panel_of(run)
    assert "no restarts left" in panel.status.value
    assert "failure noticed" not in panel.status.value


def test_a_run_without_faults_shows_no_fault_counts(panel_of):
    run = StandInRun("running")
    panel = panel_of(run)
    run.done = False
    run.emit(step(0, 0.0))
    panel.refresh()
    assert panel.status.value == "running: step 3/10"
