"""Timing a hybrid mesh's exchanges as its stages run them, for the planner.

On a ``replicas x stages`` mesh (rank = replica x stages + stage), two exchanges cost more
than the links timed on an idle pair show, once the mesh has more devices than its host has
cores (``parallel/pipeline/stage_worker.py``):

- **stage all-reduces**: each stage averages its gradients with the same stage of the other
  replicas, a ring all-reduce over a subgroup of the run's peer transport, on the stage's own
  thread, every stage group at the same moment (after the pipeline's flush): the concurrent
  rings wait on one another for cores at every hand-off;
- **hand-offs between stages**: a stage that computed a micro-batch sends it on while the other
  stages compute; the operating system treats the woken receiver as busy too, so it waits for a
  core behind the others. An idle pair (a receiver that slept) is woken at once, so the links
  alone miss this.

So every device here does what a stage does: all groups' all-reduces together after a barrier
of the whole mesh; then each pair of neighbouring stages ping-pongs, each side computing before
it sends, while the other devices compute. The client fits latency + bytes / bandwidth
(:func:`workbench.costs.fit_link`) per stage group to its slowest rank and per pair, stored
under :func:`workbench.costs.collective_key` (``ring`` over a group, ``STAGE_HANDOFF`` over a
pair, both directions), where the planner's hybrid programs find them
(``planner/step_programs.py``, ``hybrid_step``).
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Sequence

import numpy as np

from workbench.calibration.collectives_probe import on_every_device
from workbench.calibration.probe import TRANSFER_SIZES, ring_barrier
from workbench.costs import STAGE_HANDOFF, LinkFit, collective_key, fit_link
from workbench.parallel.collectives import SubgroupTransport, allreduce
from workbench.runtime.cluster import ClusterSession
from workbench.runtime.peer_transport import PeerTransport
from workbench.runtime.worker_service import device_service


def stage_groups(devices: int, stages: int) -> list[list[int]]:
    """The ranks that average one stage's gradients: stage s of every replica (rank =
    replica x stages + stage).

    Examples
    --------
    >>> stage_groups(6, 3)
    [[0, 3], [1, 4], [2, 5]]
    """
    replicas = devices // stages
    return [[replica * stages + stage for replica in range(replicas)] for stage in range(stages)]


def time_stage_allreduces(
    run_id: str,
    rank: int,
    addresses: list[str],
    device_names: list[str],
    stages: int,
    sizes: Sequence[int],
    repeats: int,
    stall_timeout: float,
) -> list[tuple[int, float]]:
    """Task on every device of the mesh: ``repeats`` ring all-reduces of float32 tensors of
    each of ``sizes`` bytes within this rank's stage group, every group at once. Returns
    ``(bytes, median seconds)`` as this rank saw them."""
    transport = PeerTransport(run_id, rank, addresses, device_names, stall_timeout)
    group = SubgroupTransport(transport, stage_groups(len(addresses), stages)[rank % stages])
    results = []
    try:
        # One untimed round first: opening channels and probing shared memory is not a cost
        # of any size.
        ring_barrier(transport, "calibrate/stages/warm/barrier")
        allreduce(group, np.ones(max(sizes[0] // 4, group.size), np.float32), "warm")
        for nbytes in sizes:
            times = []
            for index in range(repeats):
                bucket = np.ones(nbytes // 4, np.float32)
                key = f"calibrate/stages/{nbytes}/{index}"
                ring_barrier(transport, key + "/barrier")
                start = time.perf_counter()
                allreduce(group, bucket, key)
                times.append(time.perf_counter() - start)
            results.append((nbytes, statistics.median(times)))
        # No rank drops the channels while a peer still hands a segment back through them.
        ring_barrier(transport, "calibrate/stages/done")
    finally:
        device_service().forget(run_id)
    return results


_WORK = 128  # side of the matrices a device multiplies to stay busy
# What a stage computes between two hand-offs while the pair is timed: long enough that the
# operating system treats it as busy, as it treats a stage computing its micro-batches.
HANDOFF_BUSY_SECONDS = 0.002


def _multiply() -> None:
    matrix = np.ones((_WORK, _WORK))
    matrix @ matrix


def _busy_for(seconds: float) -> None:
    """Compute for ``seconds``, as a stage computes a micro-batch before it hands it on."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        _multiply()


def _busy_until(stop: threading.Event) -> None:
    """Compute until ``stop`` is set, as the mesh's other stages do meanwhile."""
    while not stop.is_set():
        _multiply()


def time_handoffs(
    run_id: str,
    rank: int,
    addresses: list[str],
    device_names: list[str],
    stages: int,
    sizes: Sequence[int],
    repeats: int,
    busy_seconds: float,
    stall_timeout: float,
) -> list[tuple[int, int, float]]:
    """Task on every device of the mesh: each pair of neighbouring stages in turn ping-pongs
    tensors of each of ``sizes`` bytes, each side computing ``busy_seconds`` before it sends
    (as a stage computes a micro-batch before it hands the result on), while every other
    device computes. Returns ``(bytes, peer, one-way seconds)`` medians for the pairs this
    rank starts: half of a round trip less the other side's compute."""
    transport = PeerTransport(run_id, rank, addresses, device_names, stall_timeout)
    results = []
    try:
        for first, second in neighbours(len(addresses), stages):
            key = f"calibrate/handoff/{first}-{second}"
            ring_barrier(transport, key + "/barrier")
            if rank in (first, second):
                peer = second if rank == first else first
                for nbytes in sizes:
                    payload = np.ones(nbytes // 4, np.float32)
                    times = []
                    for index in range(repeats + 1):
                        message = f"{key}/{nbytes}/{index}"
                        if rank == first:
                            _busy_for(busy_seconds)
                            start = time.perf_counter()
                            transport.send(peer, message, payload)
                            transport.recv(peer, message + "/echo")
                            trip = time.perf_counter() - start
                            times.append(max(trip - busy_seconds, 0.0) / 2)
                        else:
                            transport.recv(peer, message)
                            _busy_for(busy_seconds)
                            transport.send(peer, message + "/echo", payload)
                    if rank == first:
                        results.append((nbytes, second, statistics.median(times[1:])))
                if rank == first:
                    token = np.zeros(1, np.float32)
                    for other in range(transport.size):
                        if other not in (first, second):
                            transport.send(other, key + "/done", token)
            else:
                stop = threading.Event()
                spinner = threading.Thread(target=_busy_until, args=(stop,), daemon=True)
                spinner.start()
                try:
                    transport.recv(first, key + "/done")
                finally:
                    stop.set()
                    spinner.join()
        ring_barrier(transport, "calibrate/handoff/done")
    finally:
        device_service().forget(run_id)
    return results


def neighbours(devices: int, stages: int) -> list[tuple[int, int]]:
    """Each replica's pairs of consecutive stages, the pairs activations and gradients cross.

    Examples
    --------
    >>> neighbours(6, 3)
    [(0, 1), (1, 2), (3, 4), (4, 5)]
    """
    return [
        (replica * stages + stage, replica * stages + stage + 1)
        for replica in range(devices // stages)
        for stage in range(stages - 1)
    ]


def measure_handoffs(
    session: ClusterSession,
    stages: int,
    largest: int,
    busy_seconds: float,
    repeats: int = 5,
    stall_timeout: float = 60.0,
) -> dict[str, LinkFit]:
    """Each neighbouring pair's hand-off on the session's mesh (see :func:`time_handoffs`),
    fitted per pair and stored for both directions under :data:`STAGE_HANDOFF`."""
    count = len(session.addresses)
    if count // stages < 2:
        return {}
    smallest = TRANSFER_SIZES[0]
    sizes = [smallest, max(largest // 4 * 4, 2 * smallest)]
    gathered = on_every_device(
        session, time_handoffs, "handoff", stages, sizes, repeats, busy_seconds, stall_timeout
    )
    names = session.device_names
    fits = {}
    for first, second in neighbours(count, stages):
        fit = fit_link(sorted((n, s) for n, _, s in gathered[first]))
        for pair in ((first, second), (second, first)):
            fits[collective_key(STAGE_HANDOFF, [names[rank] for rank in pair])] = fit
    return fits


def measure_stage_allreduces(
    session: ClusterSession,
    stages: int,
    largest: int,
    repeats: int = 3,
    stall_timeout: float = 60.0,
) -> dict[str, LinkFit]:
    """Each stage group's all-reduce on the session's mesh (see
    :func:`time_stage_allreduces`), fitted: ``{collective_key: fit}``, one per group. Two
    sizes: the smallest of :data:`TRANSFER_SIZES` and ``largest`` bytes (the biggest bucket a
    stage reduces)."""
    count = len(session.addresses)
    if count // stages < 2:
        return {}
    smallest = TRANSFER_SIZES[0]
    sizes = [smallest, max(largest // 4 * 4, 2 * smallest)]
    gathered = on_every_device(
        session, time_stage_allreduces, "stages", stages, sizes, repeats, stall_timeout
    )
    names = session.device_names
    fits = {}
    for ranks in stage_groups(count, stages):
        # A group's all-reduce ends when its slowest rank has the result.
        slowest: dict[int, float] = {}
        for rank in ranks:
            for nbytes, seconds in gathered[rank]:
                slowest[nbytes] = max(slowest.get(nbytes, 0.0), seconds)
        group = [names[rank] for rank in ranks]
        fits[collective_key("ring", group)] = fit_link(sorted(slowest.items()))
    return fits
