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

from workbench.calibration.collectives_probe import (
    on_every_device,
    timed_at_each_size,
    two_sizes,
)
from workbench.calibration.probe import ring_barrier
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


def _time_handoffs(
    transport: PeerTransport, stages: int, sizes: Sequence[int], repeats: int, busy: float
) -> list[tuple[int, float]]:
    """Each pair of neighbouring stages in turn ping-pongs tensors of each of ``sizes`` bytes,
    each side computing ``busy`` seconds before it sends (as a stage computes a micro-batch
    before it hands it on), while every other device computes. Returns ``(bytes, one-way
    seconds)`` medians for the pair this rank starts (half a round trip less the other side's
    compute), empty for the others."""
    rank, results = transport.rank, []
    for first, second in neighbours(transport.size, stages):
        key = f"calibrate/handoff/{first}-{second}"
        ring_barrier(transport, key + "/barrier")
        if rank == first:
            for nbytes in sizes:
                payload, times = np.ones(nbytes // 4, np.float32), []
                for index in range(repeats + 1):
                    _busy_for(busy)
                    start = time.perf_counter()
                    transport.send(second, f"{key}/{nbytes}/{index}", payload)
                    transport.recv(second, f"{key}/{nbytes}/{index}/echo")
                    times.append(max(time.perf_counter() - start - busy, 0.0) / 2)
                results.append((nbytes, statistics.median(times[1:])))
            for other in set(range(transport.size)) - {first, second}:
                transport.send(other, key + "/done", np.zeros(1, np.float32))
        elif rank == second:
            for nbytes in sizes:
                for index in range(repeats + 1):
                    echoed = transport.recv(first, f"{key}/{nbytes}/{index}")
                    _busy_for(busy)
                    transport.send(first, f"{key}/{nbytes}/{index}/echo", echoed)
        else:
            stop = threading.Event()
            spinner = threading.Thread(target=_busy_until, args=(stop,), daemon=True)
            spinner.start()
            try:
                transport.recv(first, key + "/done")
            finally:
                stop.set()
                spinner.join()
    return results


def time_mesh(
    run_id: str,
    rank: int,
    addresses: list[str],
    device_names: list[str],
    stages: int,
    reduce_sizes: Sequence[int],
    handoff_sizes: Sequence[int],
    repeats: int,
    busy: float,
    stall_timeout: float,
) -> dict[str, list[tuple[int, float]]]:
    """Task on every device of the mesh: the stage all-reduces of ``reduce_sizes`` bytes (all
    groups at once), then the hand-offs of ``handoff_sizes`` bytes between neighbouring
    stages (:func:`_time_handoffs`). Returns this rank's ``(bytes, median seconds)``:
    ``reduce`` as it saw its group's all-reduces, ``handoff`` for the pair it starts."""
    transport = PeerTransport(run_id, rank, addresses, device_names, stall_timeout)
    group = SubgroupTransport(transport, stage_groups(len(addresses), stages)[rank % stages])
    try:
        # One untimed round first: opening channels and probing shared memory is not a cost
        # of any size.
        ring_barrier(transport, "calibrate/stages/warm/barrier")
        allreduce(group, np.ones(max(reduce_sizes[0] // 4, group.size), np.float32), "warm")
        reduced = timed_at_each_size(
            transport, reduce_sizes, repeats, "stages", lambda t, key: allreduce(group, t, key)
        )
        handed = _time_handoffs(transport, stages, handoff_sizes, repeats, busy)
        # No rank drops the channels while a peer still hands a segment back through them.
        ring_barrier(transport, "calibrate/mesh/done")
    finally:
        device_service().forget(run_id)
    return {"reduce": reduced, "handoff": handed}


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


def measure_mesh(
    session: ClusterSession,
    stages: int,
    reduce_bytes: int,
    handoff_bytes: int,
    busy: float = HANDOFF_BUSY_SECONDS,
    repeats: int = 3,
    stall_timeout: float = 60.0,
) -> dict[str, LinkFit]:
    """The session's mesh timed (:func:`time_mesh`) and fitted: ``{collective_key: fit}``, a
    ``ring`` per stage group (up to ``reduce_bytes``, the biggest bucket a stage reduces) to
    its slowest rank, and a ``STAGE_HANDOFF`` per neighbouring pair, both directions (up to
    ``handoff_bytes``, the biggest activation between stages)."""
    count = len(session.addresses)
    if count // stages < 2:
        return {}
    gathered = on_every_device(
        session,
        time_mesh,
        "mesh",
        stages,
        two_sizes(reduce_bytes),
        two_sizes(handoff_bytes),
        repeats,
        busy,
        stall_timeout,
    )
    names = session.device_names
    fits = {}
    for ranks in stage_groups(count, stages):
        # A group's all-reduce ends when its slowest rank has the result.
        slowest: dict[int, float] = {}
        for rank in ranks:
            for nbytes, seconds in gathered[rank]["reduce"]:
                slowest[nbytes] = max(slowest.get(nbytes, 0.0), seconds)
        fits[collective_key("ring", [names[rank] for rank in ranks])] = fit_link(
            sorted(slowest.items())
        )
    for first, second in neighbours(count, stages):
        fit = fit_link(sorted(gathered[first]["handoff"]))
        for pair in ((first, second), (second, first)):
            fits[collective_key(STAGE_HANDOFF, [names[rank] for rank in pair])] = fit
    return fits
