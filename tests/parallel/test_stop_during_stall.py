"""A run whose device stalls, restarts and stalls again: Stop ends it within seconds (neither
the stall watchdog nor a restart waits it out), and its final status names each failure's
reason, in the run store, the ``--json`` summary and the notebook panel's status line."""

from __future__ import annotations

import threading
import time

import pytest

from workbench.config import RunConfig
from workbench.events.faults import FaultTally
from workbench.launch.background_run import BackgroundRun
from workbench.notebook.panel import fault_note
from workbench.parallel import step_loop
from workbench.store import RunStore

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("no_leftover_processes")]

# task:1 computes for ever (a stuck device), so task:0 waits for its part of the all-reduce
# until the stall timeout, at every step 0 of every attempt.
STUCK = (("task:1", 1e9),)
STALL_TIMEOUT_S = 4.0


def test_stop_during_a_stall_after_a_restart_ends_the_run_and_keeps_each_reason(
    tmp_path, monkeypatch
):
    config = RunConfig(
        strategy="mirrored",
        devices=2,
        dataset="digits",
        hidden=(16,),
        batch_size=32,
        steps=100,
        simulate_straggler=STUCK,
        stall_timeout=STALL_TIMEOUT_S,
        max_restarts=1,
    )
    store = RunStore(tmp_path)
    run = BackgroundRun(config, store=store, begin=False)
    asked: list[float] = []
    timers: list[threading.Timer] = []
    send = step_loop.submit_each

    def stop() -> None:
        asked.append(time.monotonic())
        run.stop()

    def send_and_stop_once_stalled_again(*arguments, **options):
        # The second attempt's first steps: a second after they are sent they are stalled
        # (the watchdog would end them only STALL_TIMEOUT_S after they began).
        if run.log.scalars("restarts") and not timers:
            timers.append(threading.Timer(1.0, stop))
            timers[0].start()
        return send(*arguments, **options)

    monkeypatch.setattr(step_loop, "submit_each", send_and_stop_once_stalled_again)
    run.begin()
    assert run._done.wait(120), "the run did not end"
    ended = time.monotonic()

    assert asked, "the run never restarted: the test tested nothing"
    assert ended - asked[0] < 10  # before: the stall watchdog, then the restart, then cleanup
    assert run.error is None and run.state == "stopped"

    status = store.open(run.run_id).status()
    reasons = status["failure_reasons"]
    assert status["state"] == "stopped" and status["restarts"] == 1
    assert status["failures"] == len(reasons) == 2
    first, second = reasons
    # The stall the watchdog caught, and what followed it.
    assert first.startswith("step 0, task0-cpu0: StallError: ") and "task:1" in first
    assert first.endswith("restarted from step 0")
    # The stall the stop found.
    assert second.startswith("step 0, ") and "stalled" in second
    assert run.summary["failure_reasons"] == reasons
    assert status["step"] == run.step == run.summary["steps"] == 0

    tally = FaultTally()
    for event in run.events:
        tally.add(event)
    shown = fault_note(tally, running=False)
    assert "StallError" in shown and shown.count("<br>") == 2
