"""Timing a hybrid run's stage all-reduces as its stages run them, for the planner.

On a ``replicas x stages`` mesh, each stage averages its gradients with the same stage of the
other replicas: a ring all-reduce over a subgroup of the run's peer transport, on the stage's
own thread, every stage group at the same moment (after the pipeline's flush)
(``parallel/pipeline/stage_worker.py``). When the mesh has more devices than its host has
cores, those concurrent rings wait on one another for cores at every hand-off, which the
links alone (each measured on an idle pair) do not show. So every device here does exactly
what a stage does, all groups together after a barrier of the whole mesh, for tensors of two
sizes, and the client fits latency + bytes / bandwidth per stage group to its slowest rank
(:func:`workbench.costs.fit_link`), stored under :func:`workbench.costs.collective_key`
(``ring`` over the group's devices), where :func:`workbench.planner.compressed_buckets
.bucket_exchange` finds it.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence

import numpy as np

from workbench.calibration.collectives_probe import on_every_device
from workbench.calibration.probe import TRANSFER_SIZES, ring_barrier
from workbench.costs import LinkFit, collective_key, fit_link
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
