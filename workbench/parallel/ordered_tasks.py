"""A device's tasks queued on its worker one behind the other, so the next round of steps
starts the moment the current one ends.

A task that depends on another through Dask reaches its worker only once the scheduler has
heard that the other one finished: a round trip per round, paid while the device waits. Step
tasks are therefore sent without a Dask dependency, at once, with a priority that puts the
earlier step first (a worker runs its ready tasks by priority). Each one is wrapped in
:func:`run_in_order`, which keeps the order for workers with several threads too: it waits
until the worker has seen the task before it finish, and fails at once, without running,
if that one failed (the client reports the first failure and cancels the rest).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

KEPT = 256  # finished keys remembered per worker process; a round needs only the last one

_finished: dict[str, bool] = {}  # task key -> it finished well (worker side)
_changed = threading.Condition()


class PreviousTaskFailed(RuntimeError):
    """The task queued before this one on its worker failed or never ran."""


def run_in_order(
    previous: str | None, own: str, wait_seconds: float, function: Callable, *arguments: Any
) -> Any:
    """Task ``own``: ``function(*arguments)`` once this worker's task ``previous`` (None: no
    task before it) has finished well, waiting at most ``wait_seconds`` for it."""
    if previous is not None:
        with _changed:
            if not _changed.wait_for(lambda: previous in _finished, timeout=wait_seconds):
                raise PreviousTaskFailed(
                    f"{previous}, the task before it on this worker, did not finish within "
                    f"{wait_seconds:.0f}s"
                )
            if not _finished.pop(previous):
                raise PreviousTaskFailed(f"{previous}, the task before it on this worker, failed")
    succeeded = False
    try:
        result = function(*arguments)
        succeeded = True
        return result
    finally:
        with _changed:
            _finished[own] = succeeded
            for old in list(_finished)[:-KEPT]:
                del _finished[old]
            _changed.notify_all()
