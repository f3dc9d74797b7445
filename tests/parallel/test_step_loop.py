"""The client's step loop keeps the next round on each device before the current one ends,
except where the devices must stop (a checkpoint), and never lets a round run ahead of a
failure."""

from __future__ import annotations

import threading
import time

import pytest

from tests.parallel import step_tasks
from workbench.events import EventLog
from workbench.parallel.dispatch import DeviceFailure, FutureWatch
from workbench.parallel.loop_run import NO_PAUSES, LoopRun, NoPauses, RoundHooks, StepTasks
from workbench.parallel.step_loop import STEPS_PER_TASK, drive_steps
from workbench.runtime.cluster import start_cluster

pytestmark = pytest.mark.integration


def _run(total_steps: int, log: EventLog) -> LoopRun:
    return LoopRun(
        name="test",
        total_steps=total_steps,
        steps_per_epoch=10_000,
        stall_timeout=60.0,
        stop=threading.Event(),
        clock=time.monotonic,
        learning_rate=lambda step: 0.1,
        log=log,
        progress=lambda line: None,
    )


def _drive(
    session, run: LoopRun, hooks: RoundHooks = NO_PAUSES, round_seconds: float = 0.0
) -> None:
    """Rounds of ``STEPS_PER_TASK`` steps unless ``round_seconds`` lets them grow."""
    tasks = StepTasks(
        step_tasks.record_round, lambda step, count: [(step, count)] * len(session.addresses)
    )
    drive_steps(session, run, tasks, 0, hooks, round_seconds)


class PauseOnce(NoPauses):
    """Rounds that pause at ``step`` and keep what each device had run then."""

    def __init__(self, session, step: int) -> None:
        self.session, self.step = session, step
        self.asked: list[int] = []
        self.seen: list[dict] = []

    def pause_at(self, step: int) -> bool:
        self.asked.append(step)
        return step == self.step

    def at_pause(self, step: int) -> None:
        self.seen.append(self.session.client.run(step_tasks.rounds_ran))


class StopAfterFirstRound(NoPauses):
    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop

    def after_round(self, first: int, end: int, results: list) -> None:
        self.stop.set()


@pytest.fixture
def session(no_leftover_processes):
    with start_cluster(2) as session:
        yield session


def test_each_round_finds_the_next_one_waiting_on_its_worker(session):
    log, total = EventLog(), 4 * STEPS_PER_TASK
    _drive(session, _run(total, log))

    waiting = {(event.step, event.value) for event in log.scalars("next_round_waiting")}
    starts = range(0, total, STEPS_PER_TASK)
    # Both devices' reports, every round but the last (nothing follows it).
    assert waiting == {(first, 1.0) for first in starts[:-1]} | {(starts[-1], 0.0)}
    assert [event.step for event in log.scalars("loss")] == list(range(total))
    ran = session.client.run(step_tasks.rounds_ran)
    assert all(rounds == list(starts) for rounds in ran.values())  # in order, each once


def test_rounds_of_fast_steps_grow_to_last_about_the_round_time(session):
    log, total = EventLog(), 6 * STEPS_PER_TASK
    # A round takes 0.3 s whatever its steps: 15 ms a step in a round of 20.
    _drive(session, _run(total, log), round_seconds=1.0)

    ran = session.client.run(step_tasks.rounds_ran)
    starts = next(iter(ran.values()))
    assert all(rounds == starts for rounds in ran.values())
    sizes = [end - first for first, end in zip(starts, [*starts[1:], total], strict=True)]
    # The step time is known once the first round is back, after the second was sent.
    assert starts[:3] == [0, STEPS_PER_TASK, 2 * STEPS_PER_TASK]
    assert max(sizes) > STEPS_PER_TASK
    assert [event.step for event in log.scalars("loss")] == list(range(total))


def test_at_a_pause_nothing_runs_ahead_of_the_devices(session):
    log, total = EventLog(), 4 * STEPS_PER_TASK
    pause = 2 * STEPS_PER_TASK
    hooks = PauseOnce(session, pause)
    _drive(session, _run(total, log), hooks)

    # The devices had run exactly the rounds before the pause: a snapshot taken there is
    # the state at that step.
    expected = list(range(0, pause, STEPS_PER_TASK))
    assert [list(ran.values()) for ran in hooks.seen] == [[expected, expected]]
    assert hooks.asked == list(range(STEPS_PER_TASK, total + 1, STEPS_PER_TASK))  # once a round
    waiting = {event.step: event.value for event in log.scalars("next_round_waiting")}
    assert waiting[pause - STEPS_PER_TASK] == 0.0 and waiting[0] == 1.0


def test_a_failed_round_cancels_the_one_sent_after_it(session):
    session.client.run(step_tasks.fail_at, STEPS_PER_TASK)
    with pytest.raises(DeviceFailure, match=f"at step {STEPS_PER_TASK}: RuntimeError"):
        _drive(session, _run(4 * STEPS_PER_TASK, EventLog()))
    time.sleep(0.5)  # a round that had wrongly started would have recorded itself by now
    ran = session.client.run(step_tasks.rounds_ran)
    assert all(rounds == [0] for rounds in ran.values())


def test_a_stop_ends_the_run_after_the_rounds_in_flight(session):
    log = EventLog()
    run = _run(10 * STEPS_PER_TASK, log)
    _drive(session, run, StopAfterFirstRound(run.stop))
    ran = session.client.run(step_tasks.rounds_ran)
    # The round already on the devices when the stop came finishes; nothing after it.
    assert all(rounds == [0, STEPS_PER_TASK] for rounds in ran.values())
    assert log.scalars("loss")[-1].step == 2 * STEPS_PER_TASK - 1


def _fail_after(seconds: float) -> None:
    time.sleep(seconds)
    raise RuntimeError("failing on purpose")


def test_a_wait_for_results_wakes_when_one_comes_not_on_a_timer(session):
    """The client sleeps while the devices run (a wake-up would take a core from one) and
    still hears at once of a result, or of a failure."""
    finishing = session.client.submit(time.sleep, 0.3, pure=False)
    failing = session.client.submit(_fail_after, 0.6, pure=False)
    for future in (finishing, failing):
        watch = FutureWatch([future])
        started = time.monotonic()
        watch.wait(60.0)
        assert future.status in ("finished", "error")
        assert time.monotonic() - started < 20  # not the 60 s the wait allows
    assert failing.status == "error"
