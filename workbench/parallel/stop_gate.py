"""Stopping a run's devices between two steps, every device at the same step.

A device goes from one step to the next, and from one task to the next queued behind it
(:mod:`workbench.parallel.ordered_tasks`), without asking the client, so a Stop must reach the
devices themselves. Stopping each one as soon as it hears would leave a peer waiting in a
collective for a device that stopped a step earlier, so the client agrees the stop in two
calls, each running on the workers' event loops beside their busy task threads
(:func:`stop_devices`):

1. :func:`hold`: a device finishes the step it is in and waits before beginning another; each
   says how many steps it has begun (the next step it would begin).
2. :func:`release`: the largest of those is the stop step. A device runs up to it (a peer one
   step behind catches up with the step the others began) and begins no more: the rest of its
   task and every task queued behind it return what ran.

After a Stop the devices therefore complete the step in flight, and no other
(docs/architecture/faults.md, "Faults and stragglers").
"""

from __future__ import annotations

import threading
import time
from typing import Any

HOLD_LIMIT_S = 30.0  # a held device waits this long for the stop step, then begins no more
KEPT = 64  # runs remembered per worker process

_changed = threading.Condition()
_begun: dict[str, int] = {}  # run id -> the next step this worker's device would begin
_held: set[str] = set()
_stop_at: dict[str, int] = {}


def may_begin(run_id: str, step: int) -> bool:
    """Called by a device program before each step: whether to begin ``step`` (False: the run
    was stopped before it; return what ran)."""
    with _changed:
        if run_id in _held and not _changed.wait_for(
            lambda: run_id not in _held, timeout=HOLD_LIMIT_S
        ):
            return False  # the client that held it is gone: nothing waits for more steps
        stop_at = _stop_at.get(run_id)
        if stop_at is not None and step >= stop_at:
            return False
        _begun[run_id] = step + 1
        if len(_begun) > KEPT:  # on a step's path: trim only when there is something to trim
            for old in list(_begun)[:-KEPT]:
                del _begun[old]
        return True


def hold(run_id: str) -> int | None:
    """``Client.run`` entry point: no new step of ``run_id`` on this worker until
    :func:`release`; the next step its device would begin (None: it began none yet)."""
    with _changed:
        _held.add(run_id)
        return _begun.get(run_id)


def release(run_id: str, stop_at: int) -> None:
    """``Client.run`` entry point: steps of ``run_id`` from ``stop_at`` on are not begun."""
    with _changed:
        _stop_at[run_id] = stop_at
        for old in list(_stop_at)[:-KEPT]:
            del _stop_at[old]
        _held.discard(run_id)
        _changed.notify_all()


def forget(run_id: str) -> None:
    """Drop what this worker knows of ``run_id`` (its devices' state is dropped)."""
    with _changed:
        _begun.pop(run_id, None)
        _stop_at.pop(run_id, None)
        _held.discard(run_id)
        _changed.notify_all()


class DevicesUnreachable(RuntimeError):
    """A device did not answer the stop (stalled, stopped or gone)."""


def stop_devices(client: Any, run_id: str, addresses: list[str], timeout: float) -> int:
    """Agree the stop step of ``run_id`` with the workers at ``addresses`` and return it;
    :class:`DevicesUnreachable` when one of them does not answer within ``timeout`` seconds
    (each of the two calls)."""
    begun = run_on_workers(client, hold, (run_id,), addresses, timeout)
    stop_at = max((step for step in begun.values() if step is not None), default=0)
    run_on_workers(client, release, (run_id, stop_at), addresses, timeout)
    return stop_at


def run_on_workers(
    client: Any, function, arguments: tuple, addresses: list[str], timeout: float
) -> dict:
    """``function(*arguments)`` on the event loop of each worker at ``addresses`` (beside a
    task thread that may be stuck), waiting at most ``timeout`` seconds for their answers;
    :class:`DevicesUnreachable` when one does not answer."""
    started = time.monotonic()
    try:
        answers = client.sync(
            client._run,
            function,
            *arguments,
            workers=addresses,
            on_error="return",
            callback_timeout=timeout,
        )
    except Exception as error:  # a timeout, or the scheduler gone
        raise DevicesUnreachable(
            f"the devices did not answer the stop within {time.monotonic() - started:.1f}s "
            f"({type(error).__name__})"
        ) from None
    failed = [address for address in addresses if isinstance(answers.get(address), Exception)]
    missing = [address for address in addresses if address not in answers]
    if failed or missing:
        raise DevicesUnreachable(f"the workers {', '.join(failed + missing)} did not answer")
    return answers
