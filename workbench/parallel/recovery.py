"""Getting a synchronous run going again after a device failed: which workers it goes on
with, and on how many devices.

A failed device's variables died with it, and its peers are stuck in the step they shared with
it, so every worker of the run is restarted (through its Dask nanny) and every device is later
restored from the last checkpoint, as torchrun does. A local cluster's nanny also restarts the
worker that died; an existing cluster may offer a spare. The run waits up to
``--replacement-timeout`` for as many workers as it had; an ``--elastic`` data-parallel run goes
on with fewer when they do not come, as many as divide the global batch evenly (the batch and
its order stay the same, so the trajectory does too: docs/architecture/faults.md, "Faults and
stragglers"). A Stop ends each of these waits at once (:class:`~workbench.parallel.dispatch.
StopRequested`): no new attempt starts after it.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable

from workbench.parallel.dispatch import DeviceFailure, StopRequested
from workbench.runtime.cluster import ClusterSession, ordered_workers
from workbench.runtime.worker_service import SERVICE_NAME

RESTART_TIMEOUT_S = 60.0


def _check(stop: threading.Event | None) -> None:
    if stop is not None and stop.is_set():
        raise StopRequested


def restart_survivors(session: ClusterSession, stop: threading.Event | None = None) -> int:
    """End the run's worker processes that are still there (their state is the failed
    attempt's, and their task thread may be stuck in a collective with the dead peer); their
    nannies start fresh ones at once. A graceful restart would first wait seconds for that
    stuck thread."""
    alive = set(ordered_workers(session.client))
    survivors = [address for address in session.addresses if address in alive]
    others = len(alive) - len(survivors)  # workers outside the run, e.g. spares
    if survivors:
        with contextlib.suppress(Exception):  # they die before they can answer
            session.client.run(_exit_now, workers=survivors, wait=False)
        deadline = time.monotonic() + RESTART_TIMEOUT_S
        while set(survivors) & set(ordered_workers(session.client)):
            _check(stop)
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
    return len(survivors) + others


def forget_runs(run_ids: list[str], dask_worker=None) -> None:
    """``Client.run`` entry point: drop what the failed attempts left on this worker's host
    (shared-memory segments of a peer that died)."""
    for run_id in run_ids:
        dask_worker.plugins[SERVICE_NAME].forget(run_id)


async def _exit_now() -> None:
    # A coroutine runs on the worker's event loop, not behind the stuck task thread.
    os._exit(1)


def wait_for_workers(
    session: ClusterSession,
    wanted: int,
    restarting: int,
    timeout: float,
    stop: threading.Event | None = None,
) -> list[str]:
    """Up to ``wanted`` worker addresses in rank order: first the ``restarting`` ones this
    recovery restarted (they come back), then up to ``timeout`` seconds for the rest."""
    restarted_by = time.monotonic() + RESTART_TIMEOUT_S
    deadline = None
    while True:
        _check(stop)
        workers = ordered_workers(session.client)
        if len(workers) >= wanted:
            return workers[:wanted]
        now = time.monotonic()
        if len(workers) >= min(restarting, wanted) or now > restarted_by:
            deadline = deadline or now + timeout
            if now >= deadline:
                return workers
        time.sleep(0.1)


def elastic_device_count(available: int, batch_size: int) -> int:
    """The most devices, at most ``available``, that split the global batch evenly.

    Examples
    --------
    >>> elastic_device_count(3, 64), elastic_device_count(2, 66), elastic_device_count(0, 8)
    (2, 2, 0)
    """
    return next((n for n in range(available, 0, -1) if batch_size % n == 0), 0)


def devices_after_failure(
    session: ClusterSession,
    failure: DeviceFailure,
    wanted: int,
    timeout: float,
    elastic_batch: int | None,
    names_for: Callable[[int], list[str]],
    stop: threading.Event | None = None,
) -> None:
    """Rebind ``session`` to the workers the run goes on with, or re-raise ``failure``: fewer
    than ``wanted`` came back and the run is not elastic (``elastic_batch``: the global batch
    an elastic run re-shards); :class:`StopRequested` once ``stop`` is set."""
    restarting = restart_survivors(session, stop)
    workers = wait_for_workers(session, wanted, restarting, timeout, stop)
    count = len(workers)
    if count < wanted:
        count = elastic_device_count(count, elastic_batch) if elastic_batch else 0
        if count == 0:
            raise DeviceFailure(
                f"{failure} ; {len(workers)} of {wanted} workers were back within "
                f"--replacement-timeout {timeout:g}s",
                failure.device,
                failure.step,
            ) from failure
    session.rebind(workers[:count], names_for(count))
    with contextlib.suppress(Exception):  # best effort: the segments are only names in /dev/shm
        session.client.run(forget_runs, session.earlier_run_ids, workers=session.addresses)
