"""Dispatching per-device work as Dask tasks, and noticing when a device fails.

Keys read ``dtrain-<strategy>-<phase>-<step>-<device>`` so the dashboard's task stream tells
the story; tasks are pinned to their worker (a device's variables live there) and marked
impure (a step must run, not be served from cache). A failed or silent device becomes an error
that names the device and the step; the client never waits forever.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from distributed import KilledWorker
from distributed.comm.core import CommClosedError

from workbench.parallel.ordered_tasks import PreviousTaskFailed, run_in_order
from workbench.runtime.cluster import ClusterSession
from workbench.runtime.devices import device_tag
from workbench.safe_io import ForeignPathError


class DeviceFailure(RuntimeError):
    """A device failed or stopped answering; the message names it and the step (``device``
    and ``step`` say the same for code that recovers). ``recoverable``: the device died or
    stalled, so a restore from a checkpoint may go on; an error its own code raised (out of
    memory, a bad input) would only happen again. ``reason``: what happened, in a line (the
    failure event's, docs/architecture/events.md, "Events")."""

    def __init__(
        self,
        message: str,
        device: str | None = None,
        step: int | None = None,
        recoverable: bool = True,
        reason: str | None = None,
    ) -> None:
        super().__init__(message)
        self.device, self.step, self.recoverable = device, step, recoverable
        self.reason = reason or message


class StopRequested(Exception):
    """The run was asked to stop while the client waited for its devices."""


class StoppedInFault(Exception):
    """The run was asked to stop while a device was stalled or dead, or while the run
    recovered from that: its devices cannot hand over their variables, and the run ends with
    its last checkpoint's. ``reason``: the stall's, when the stop found one (None: the fault
    was already recorded)."""

    def __init__(self, message: str, step: int | None = None, reason: str | None = None) -> None:
        super().__init__(message)
        self.step, self.reason = step, reason


# Errors a device's task raises when a peer died or stalled (a stall, a peer's connection
# closed, the task queued behind a failed one): a restore gets past them. Any other error
# came from the device's own work and would only happen again.
_PEER_ERRORS = (TimeoutError, PreviousTaskFailed, CommClosedError, KilledWorker)
# How long a wait for results sleeps between two looks at the Stop button and the deadline
# when no result came in; a result wakes it at once (:class:`FutureWatch`).
WAKE_S = 0.05


class FutureWatch:
    """Wakes whoever waits on it as soon as one of ``futures`` leaves ``pending`` (finished,
    failed, cancelled or lost), through the futures' done callbacks.

    A wait that polled the futures every few milliseconds would wake the client hundreds of
    times a second; on a machine whose cores the devices keep busy, each wake-up takes a
    core from a device (docs/architecture/dask-costs.md, "What Dask costs")."""

    def __init__(self, futures: Sequence) -> None:
        self._changed = threading.Event()
        for future in futures:
            future.add_done_callback(self._wake)

    def _wake(self, _future: Any) -> None:
        self._changed.set()

    def wait(self, seconds: float = WAKE_S) -> None:
        """Return once a future changed since the last wait, or after ``seconds``; the
        futures' states are current when it returns."""
        self._changed.wait(seconds)
        self._changed.clear()


def submit_each(
    session: ClusterSession,
    strategy: str,
    phase: str,
    step: int | None,
    function: Callable,
    arguments: Sequence[tuple],
    ranks: Sequence[int] | None = None,
    in_order: InOrder | None = None,
) -> list:
    """One task per device of ``ranks`` (default: all, in rank order), with its arguments;
    ``in_order``: each task queued on its worker behind that device's task in
    ``in_order.after`` (:mod:`workbench.parallel.ordered_tasks`)."""
    futures = []
    ranks = list(range(len(session.addresses))) if ranks is None else list(ranks)
    for index, (rank, args) in enumerate(zip(ranks, arguments)):
        address = session.addresses[rank]
        where = f"{step}-" if step is not None else ""
        tag = f"dtrain-{strategy}-{phase}-{where}{device_tag(session.device_names[rank])}"
        key = f"{tag}-{session.run_id}"
        task: tuple = (function, *args)
        priority = 0
        if in_order is not None:
            previous = in_order.after[index].key if in_order.after else None
            task = (run_in_order, previous, key, in_order.wait_seconds, *task)
            priority = -(step or 0)  # the earlier step first
        futures.append(
            session.client.submit(
                *task,
                key=key,
                workers=[address],
                allow_other_workers=False,
                pure=False,
                retries=0,
                priority=priority,
            )
        )
    return futures


@dataclass(frozen=True)
class InOrder:
    """Queue each task behind its device's task in ``after`` (futures, one per device; empty:
    the first of a series), waiting at most ``wait_seconds`` for that one to finish."""

    after: Sequence = ()
    wait_seconds: float = 600.0


def wait_all(
    session: ClusterSession,
    futures: Sequence,
    what: str,
    step: int | None,
    deadline: float,
    ranks: Sequence[int] | None = None,
    stop: threading.Event | None = None,
) -> list[Any]:
    """Results of ``futures`` (one per rank of ``ranks``), or :class:`DeviceFailure` naming
    the device that failed or went silent; :class:`StopRequested` as soon as ``stop`` is set
    (the futures are left to the caller)."""
    ranks = list(range(len(futures))) if ranks is None else list(ranks)

    started = checked = time.monotonic()
    pending = list(futures)
    watch = FutureWatch(futures)  # unlike distributed.wait, needs no default client
    while pending:
        if stop is not None and stop.is_set():
            raise StopRequested
        if time.monotonic() - checked > 0.5:
            checked = time.monotonic()
            _raise_if_a_device_left(session, futures, what, step)
        watch.wait()
        for future in list(pending):
            if future.status == "finished":
                pending.remove(future)
            elif future.status in ("error", "cancelled", "lost"):
                rank = ranks[list(futures).index(future)]
                status, error = future.status, None  # before the cancel below changes it
                try:
                    error = future.exception(timeout=5)
                    detail = f"{type(error).__name__}: {error}" if error else status
                except Exception as problem:  # the worker itself is gone
                    detail = f"{status} ({problem!r})"
                # A peer's failure is usually the echo of a device that died: name that one.
                _raise_if_a_device_left(session, futures, what, step, detail)
                cancel_all(session, futures)
                raise DeviceFailure(
                    f"{session.device_names[rank]} failed during {what} at step {step}: {detail}",
                    session.device_names[rank],
                    step,
                    # Another user's object where the run keeps its shared memory would be met
                    # again (docs/security/shared-memory.md).
                    recoverable=(status != "error" or isinstance(error, _PEER_ERRORS))
                    and not isinstance(error, ForeignPathError),
                    reason=f"{device_tag(session.device_names[rank])}: {detail}",
                )
        if pending and time.monotonic() - started > deadline:
            cancel_all(session, futures)
            silent = [session.device_names[ranks[list(futures).index(f)]] for f in pending]
            raise DeviceFailure(
                f"{', '.join(silent)} did not finish {what} at step {step} within "
                f"{deadline:.0f}s (stalled or died)",
                silent[0],
                step,
                reason=f"{', '.join(map(device_tag, silent))}: did not finish {what} within "
                f"{deadline:.0f}s (stalled or died)",
            )
    return _gather(session, futures, what, step, max(deadline - (time.monotonic() - started), 5))


def _gather(session: ClusterSession, futures: Sequence, what: str, step, timeout: float) -> list:
    """The finished futures' results. A worker that dies after finishing takes its results
    with it, and a result pinned to a dead worker is waited for forever, so the gather is
    bounded (``callback_timeout``; ``Client.gather`` itself takes none) and retried in short
    slices, checking between them that every device is still there."""
    client = session.client
    deadline = time.monotonic() + timeout
    while True:
        remaining = deadline - time.monotonic()
        try:
            return client.sync(
                client._gather, list(futures), callback_timeout=max(min(remaining, 2.0), 0.1)
            )
        except TimeoutError:
            _raise_if_a_device_left(session, futures, what, step)
            if time.monotonic() >= deadline:
                raise DeviceFailure(
                    f"the results of {what} at step {step} did not arrive within {timeout:.0f}s",
                    None,
                    step,
                ) from None


def cancel_all(session: ClusterSession, futures: Sequence) -> None:
    with contextlib.suppress(Exception):
        session.client.cancel(list(futures))


def _alive_workers(session: ClusterSession) -> set[str] | None:
    try:
        return set(session.client.run_on_scheduler(_worker_addresses))
    except Exception:
        return None  # the scheduler is unreachable; the deadline will report it


def _worker_addresses(dask_scheduler=None) -> list[str]:
    return list(dask_scheduler.workers)


def _raise_if_a_device_left(
    session: ClusterSession, futures: Sequence, what: str, step: int | None, detail: str = ""
) -> None:
    """A killed worker leaves the scheduler at once (its comms close); a nanny may restart it
    under a new address, but the device's variables died with it, so the run cannot go on."""
    alive = _alive_workers(session)
    if alive is None:
        return
    for rank, address in enumerate(session.addresses):
        if address not in alive:
            cancel_all(session, futures)
            echo = f"; its peers reported: {detail}" if detail else ""
            raise DeviceFailure(
                f"{session.device_names[rank]} died during {what} at step {step} "
                f"(its worker {address} left the cluster){echo}",
                session.device_names[rank],
                step,
                reason=f"{device_tag(session.device_names[rank])}: died (its worker left the "
                "cluster)",
            )
