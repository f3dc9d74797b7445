"""Timing the collectives as a replica runs them, for the planner's calibration.

A mirrored replica hands each bucket to its communication thread, which all-reduces it over
the peer transport, and takes the result back; a central-storage replica reduces each bucket
to rank 0 and, after rank 0's update, receives the new values broadcast from it
(``parallel/data_parallel/replica.py``): thread handoffs, the channels' wake-ups, copies and
adds, whatever the links alone do not show. Each device here does exactly that for tensors of
several sizes, every rank starting together (after a
barrier: the wait for a late replica is the planner's straggler allowance, not the
collective's), and the client fits latency + bytes / bandwidth to the medians
(:func:`workbench.costs.fit_link`). The fits are stored in the calibration under
:func:`workbench.costs.collective_key`.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from workbench.calibration.probe import TRANSFER_SIZES, ring_barrier
from workbench.costs import LinkFit, collective_key, fit_link
from workbench.parallel.collectives import allreduce, broadcast, reduce
from workbench.runtime.cluster import ClusterSession
from workbench.runtime.peer_transport import PeerTransport
from workbench.runtime.worker_service import SERVICE_NAME, device_service

# Central storage's halves, run on the replica's own thread; the rest are all-reduce
# algorithms, run on its communication thread.
CENTRAL_KINDS = ("reduce", "broadcast")
# Runs of each size: a collective of a few MiB between busy processes on a shared host
# swings by a factor of two or three from one run to the next, and the median of three
# draws inherits it (docs/architecture/prediction.md, "How a step is predicted").
COLLECTIVE_REPEATS = 9


def _collective(transport, bucket, key: str, kind: str, groups):
    if kind == "reduce":
        return reduce(transport, bucket, key)
    if kind == "broadcast":
        return broadcast(transport, bucket, key)
    return allreduce(transport, bucket, key, kind, groups, True)


def two_sizes(largest: int) -> list[int]:
    """The sizes a collective is timed at: the smallest of :data:`TRANSFER_SIZES` (what any
    collective pays) and ``largest`` bytes (the biggest the run moves at once), so the fit is
    exact where the run's full buckets are and interpolates the rest.

    Examples
    --------
    >>> two_sizes(1 << 20), two_sizes(100)
    ([1024, 1048576], [1024, 2048])
    """
    smallest = TRANSFER_SIZES[0]
    return [smallest, max(largest // 4 * 4, 2 * smallest)]


def timed_at_each_size(
    transport: PeerTransport,
    sizes: Sequence[int],
    repeats: int,
    name: str,
    run: Callable[[Any, str], None],
) -> list[tuple[int, float]]:
    """``repeats`` runs of ``run(tensor, key)`` on float32 tensors of each of ``sizes`` bytes,
    every rank starting each together after a barrier (the wait for a late rank is not the
    exchange's cost). Returns ``(bytes, median seconds)`` as this rank saw them."""
    results = []
    for nbytes in sizes:
        times = []
        for index in range(repeats):
            bucket = np.ones(nbytes // 4, np.float32)
            key = f"calibrate/{name}/{nbytes}/{index}"
            ring_barrier(transport, key + "/barrier")
            start = time.perf_counter()
            run(bucket, key)
            times.append(time.perf_counter() - start)
        results.append((nbytes, statistics.median(times)))
    return results


def time_collective(
    run_id: str,
    rank: int,
    addresses: list[str],
    device_names: list[str],
    kind: str,
    groups: Sequence[Sequence[int]],
    sizes: Sequence[int],
    repeats: int,
    stall_timeout: float,
) -> list[tuple[int, float]]:
    """Task on every device: ``repeats`` collectives ``kind`` (an all-reduce algorithm, or
    ``reduce`` or ``broadcast`` to and from rank 0) of float32 tensors of each of ``sizes``
    bytes, as a replica runs them. Returns ``(bytes, median seconds)`` as this rank saw
    them."""
    transport = PeerTransport(run_id, rank, addresses, device_names, stall_timeout)
    communication = ThreadPoolExecutor(1, thread_name_prefix="allreduce")
    try:
        # One untimed all-reduce first: the transport's first uses (opening channels, probing
        # shared memory) are not any size's cost.
        warm = np.ones(max(sizes[0] // 4, transport.size), np.float32)
        ring_barrier(transport, "calibrate/warm/barrier")
        _collective(transport, warm, "calibrate/warm", kind, groups)

        def run(bucket, key: str) -> None:
            if kind in CENTRAL_KINDS:
                total = _collective(transport, bucket, key, kind, groups)
            else:
                total = communication.submit(
                    _collective, transport, bucket, key, kind, groups
                ).result()
            if total is not None and kind != "broadcast":
                total *= 1.0 / transport.size  # the replica's mean, as it takes it

        results = timed_at_each_size(transport, sizes, repeats, kind, run)
        # No rank drops the channels while a peer still hands a segment back through them.
        ring_barrier(transport, "calibrate/done")
    finally:
        communication.shutdown()
        device_service().forget(run_id)
    return results


def _forget(run_id: str, dask_worker=None) -> None:
    """On a worker's event loop (``client.run``): drop what ``run_id`` left there."""
    dask_worker.plugins[SERVICE_NAME].forget(run_id)


def on_every_device(
    session: ClusterSession, task: Callable[..., Any], name: str, *arguments: Any
) -> list[Any]:
    """``task(run_id, rank, addresses, device_names, *arguments)`` on every device of the
    session at once (the run id: the session's, ``-calibrate-`` and ``name``), each rank's
    result in rank order; then what the run left on the workers is dropped."""
    run_id = f"{session.run_id}-calibrate-{name}"
    futures = [
        session.client.submit(
            task,
            run_id,
            rank,
            session.addresses,
            session.device_names,
            *arguments,
            workers=[address],
            pure=False,
            key=f"dtrain-calibrate-{name}-{rank}-{session.run_id}",
        )
        for rank, address in enumerate(session.addresses)
    ]
    gathered = session.client.gather(futures)
    # Segments handed back after a rank had forgotten the run were made again: gone now.
    session.client.run(_forget, run_id, workers=list(session.addresses))
    return gathered


def measure_collective(
    session: ClusterSession,
    kind: str,
    groups: Sequence[Sequence[int]],
    largest: int,
    repeats: int = COLLECTIVE_REPEATS,
    stall_timeout: float = 60.0,
) -> dict[str, LinkFit]:
    """The collective ``kind`` (see :func:`time_collective`) over the session's devices,
    fitted: ``{collective_key: fit}``. Two sizes: the smallest of :data:`TRANSFER_SIZES` (what
    any collective pays) and ``largest`` bytes (the biggest bucket the run will reduce), so
    the fit is exact where the run's full buckets are and interpolates its last one."""
    if len(session.addresses) < 2:
        return {}
    sizes = two_sizes(largest)
    gathered = on_every_device(
        session,
        time_collective,
        kind,
        kind,
        [list(group) for group in groups],
        sizes,
        repeats,
        stall_timeout,
    )
    # The collective ends when its slowest rank has its result: the largest time per size.
    slowest: dict[int, float] = {}
    for rows in gathered:
        for nbytes, seconds in rows:
            slowest[nbytes] = max(slowest.get(nbytes, 0.0), seconds)
    names = session.device_names
    rank_groups = [[names[rank] for rank in group] for group in groups]
    return {collective_key(kind, names, rank_groups): fit_link(sorted(slowest.items()))}
