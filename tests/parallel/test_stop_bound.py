"""Stop ends a run after the step in flight, rounds sent ahead included, and what ran is what
the run's handle, its record in the run store and its ``--json`` summary say."""

from __future__ import annotations

import pytest

from workbench.config import RunConfig
from workbench.events.records import ScalarEvent
from workbench.launch.background_run import BackgroundRun
from workbench.parallel.step_loop import STEPS_PER_TASK
from workbench.store import RunStore

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_leftover_processes")]

# Slow steps that leave the CPUs free: every device's compute sleeps (FACTOR - 1) times what it
# took, so a stop reaches the devices within a step or two of being asked on a busy machine.
SLOW = (("task:0", 100.0), ("task:1", 100.0))
RUNS = {
    "mirrored": dict(strategy="mirrored", devices=2),
    "pipeline": dict(strategy="pipeline", devices=2, stages=2, microbatches=2),
}
# Steps the devices may begin between the stop and its reaching them (the step in flight, a
# peer one step behind, the time the two calls of the stop take).
SLACK = 5


@pytest.mark.parametrize("name", list(RUNS))
def test_a_stop_ends_the_run_at_the_step_in_flight_and_records_it(name, tmp_path):
    config = RunConfig(
        **RUNS[name],
        dataset="digits",
        hidden=(16,),
        batch_size=32,
        steps=10 * STEPS_PER_TASK,
        simulate_straggler=SLOW,
    )
    store = RunStore(tmp_path)
    run = BackgroundRun(config, store=store, begin=False)
    # The devices have just ended the first round (its last loss is logged) and are running
    # the round sent ahead of it.
    asked_at = STEPS_PER_TASK

    def stop_at_the_end_of_the_first_round(event) -> None:
        if isinstance(event, ScalarEvent) and event.name == "loss" and event.step == asked_at - 1:
            run.stop()

    run.log.subscribe(stop_at_the_end_of_the_first_round)
    run.begin().wait(120)

    completed = run.step
    # Before, the round sent ahead ran whole: asked_at + STEPS_PER_TASK.
    assert asked_at <= completed <= asked_at + SLACK
    assert run.state == "stopped"
    status = store.open(run.run_id).status()
    assert (status["state"], status["step"], status["steps"]) == ("stopped", completed, 200)
    assert run.summary["first_step"] + run.summary["steps"] == completed
    losses = [event.step for event in run.log.scalars("loss")]
    assert losses == list(range(completed))  # every step that ran, once
