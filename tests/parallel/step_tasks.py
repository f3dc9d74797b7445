"""Step tasks for the step loop's tests: each records, in its worker process, which rounds ran
and whether the round after it was already waiting on the worker while it ran."""

from __future__ import annotations

import time

from distributed import get_worker

RAN: list[int] = []  # first steps of the rounds this worker process ran, in order
FAIL_AT = -1


def record_round(first: int, count: int) -> dict:
    """A round of ``count`` steps from ``first``: no events, loss 1.0 a step."""
    if first == FAIL_AT:
        raise RuntimeError(f"failing on purpose at step {first}")
    time.sleep(0.3)  # long enough for the client to have sent the next round
    following = f"-step-{first + count}-"
    waiting = any(following in str(key) for key in get_worker().state.tasks)
    RAN.append(first)
    return {
        "events": [],
        "losses": [(step, 1.0) for step in range(first, first + count)],
        "scalars": [("next_round_waiting", first, float(waiting), None)],
    }


def rounds_ran() -> list[int]:
    return list(RAN)


def fail_at(step: int) -> None:
    global FAIL_AT
    FAIL_AT = step
