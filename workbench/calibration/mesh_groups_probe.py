"""Timing a device mesh's exchanges as its devices run them, for the planner.

On a ``dp x tp x pp`` mesh (rank = (replica x pp + stage) x tp + tensor, see
:mod:`workbench.parallel.mesh`), three exchanges cost more than the links timed on an idle pair
show, once the mesh has more devices than its host has cores
(``parallel/pipeline/stage_worker.py``, ``parallel/pipeline/mesh_stage.py``):

- **data all-reduces**: each device averages its gradients with the devices holding the same
  shard (its data group), a ring all-reduce over a subgroup of the run's peer transport, every
  data group at the same moment (after the pipeline's flush): the concurrent rings wait on one
  another for cores at every hand-off;
- **tensor all-reduces**: inside every forward and backward, the devices splitting the same
  layers sum their partial results, every tensor group between computes of its own: a rank
  that reaches the all-reduce waits for its peers, which may be waiting for a core behind the
  other groups' compute;
- **hand-offs between stages**: a stage that computed a micro-batch sends it on while the other
  stages compute; the operating system treats the woken receiver as busy too, so it waits for a
  core behind the others. An idle pair (a receiver that slept) is woken at once, so the links
  alone miss this.

So every device here does what the mesh's devices do: all data groups' all-reduces together
after a barrier of the whole mesh; then all tensor groups' all-reduces together, each rank
computing before each one; then each pair of neighbouring stages ping-pongs, each side
computing before it sends, while the other devices compute. The client fits latency + bytes /
bandwidth (:func:`workbench.costs.fit_link`) per group to its slowest rank and per pair, stored
under :func:`workbench.costs.collective_key` (``ring`` over a data group,
``TENSOR_ALLREDUCE`` over a tensor group, ``STAGE_HANDOFF`` over a pair, both directions),
where the planner's hybrid and mesh programs find them (``planner/step_programs.py``,
``hybrid_step``; ``planner/mesh_step.py``).
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
from workbench.costs import STAGE_HANDOFF, TENSOR_ALLREDUCE, LinkFit, collective_key, fit_link
from workbench.parallel.collectives import SubgroupTransport, allreduce
from workbench.parallel.mesh import MeshPoint, MeshShape
from workbench.runtime.cluster import ClusterSession
from workbench.runtime.peer_transport import PeerTransport
from workbench.runtime.worker_service import device_service


def data_groups(mesh: MeshShape) -> list[tuple[int, ...]]:
    """Each group of ranks that average one shard's gradients: the same tensor rank and stage
    of every replica.

    Examples
    --------
    >>> data_groups(MeshShape(dp=2, pp=3))
    [(0, 3), (1, 4), (2, 5)]
    """
    return sorted({mesh.data_group(rank) for rank in range(mesh.devices)})


def tensor_groups(mesh: MeshShape) -> list[tuple[int, ...]]:
    """Each group of ranks that split the same layers: every tensor rank of one replica's
    stage.

    Examples
    --------
    >>> tensor_groups(MeshShape(dp=2, tp=2))
    [(0, 1), (2, 3)]
    """
    return sorted({mesh.tensor_group(rank) for rank in range(mesh.devices)})


def neighbours(mesh: MeshShape) -> list[tuple[int, int]]:
    """Each pair of consecutive stages (same replica and tensor rank), the pairs activations
    and gradients cross.

    Examples
    --------
    >>> neighbours(MeshShape(dp=2, pp=3))
    [(0, 1), (1, 2), (3, 4), (4, 5)]
    >>> neighbours(MeshShape(tp=2, pp=2))
    [(0, 2), (1, 3)]
    """
    return [
        (
            mesh.rank(MeshPoint(replica, tensor, stage)),
            mesh.rank(MeshPoint(replica, tensor, stage + 1)),
        )
        for replica in range(mesh.dp)
        for tensor in range(mesh.tp)
        for stage in range(mesh.pp - 1)
    ]


def _reducing_groups(mesh: MeshShape) -> list[tuple[str, str, tuple[int, ...]]]:
    """``(kind, part, ranks)`` for every group of ``mesh`` that all-reduces: its calibration
    kind (``ring`` for a data group, ``TENSOR_ALLREDUCE`` for a tensor group) and the part of
    :func:`time_mesh`'s result that times it."""
    return [
        (kind, part, group)
        for kind, part, groups in (
            ("ring", "reduce", data_groups(mesh)),
            (TENSOR_ALLREDUCE, "tensor", tensor_groups(mesh)),
        )
        for group in groups
        if len(group) > 1
    ]


def mesh_keys(mesh: MeshShape, names: Sequence[str]) -> list[str]:
    """The calibration keys :func:`measure_mesh` stores for ``mesh`` on the devices
    ``names`` (in rank order): a ``ring`` per data group, a ``TENSOR_ALLREDUCE`` per tensor
    group and a ``STAGE_HANDOFF`` per neighbouring pair, both directions."""
    keys = [
        collective_key(kind, [names[rank] for rank in group])
        for kind, _, group in _reducing_groups(mesh)
    ]
    return keys + [
        collective_key(STAGE_HANDOFF, [names[rank] for rank in pair])
        for first, second in neighbours(mesh)
        for pair in ((first, second), (second, first))
    ]


_WORK = 128  # side of the matrices a device multiplies to stay busy
# What a device computes between two exchanges while they are timed (a stage's micro-batch
# before it hands it on, a tensor rank's layers before their all-reduce): long enough that the
# operating system treats it as busy, as it treats a device computing its share of a step.
BUSY_SECONDS = 0.002
# Timings per size, their median kept: with more devices than cores each one swings with
# what the operating system runs beside it, and the whole probe stays well under a second.
REPEATS = 9


def _multiply() -> None:
    matrix = np.ones((_WORK, _WORK))
    matrix @ matrix


def _busy_for(seconds: float) -> None:
    """Compute for ``seconds``, as a device computes before its next exchange."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        _multiply()


def _busy_until(stop: threading.Event) -> None:
    """Compute until ``stop`` is set, as the mesh's other devices do meanwhile."""
    while not stop.is_set():
        _multiply()


def _time_tensor_allreduces(
    transport: PeerTransport,
    group: SubgroupTransport,
    sizes: Sequence[int],
    repeats: int,
    busy: float,
) -> list[tuple[int, float]]:
    """Every tensor group at once: each rank computes ``busy`` seconds, then all-reduces a
    tensor of each of ``sizes`` bytes in its group, as a tensor rank computes its layers and
    then sums their partial results. Returns ``(bytes, median seconds)`` as this rank saw them
    (the wait for a peer still computing or waiting for a core is part of the cost)."""
    results = []
    for nbytes in sizes:
        ring_barrier(transport, f"calibrate/tensor/{nbytes}/barrier")
        payload, times = np.ones(nbytes // 4, np.float32), []
        for index in range(repeats + 1):
            _busy_for(busy)
            start = time.perf_counter()
            allreduce(
                group, payload.copy(), f"calibrate/tensor/{nbytes}/{index}", "ring", inplace=True
            )
            times.append(time.perf_counter() - start)
        results.append((nbytes, statistics.median(times[1:])))
    return results


def _time_handoffs(
    transport: PeerTransport,
    pairs: Sequence[tuple[int, int]],
    sizes: Sequence[int],
    repeats: int,
    busy: float,
) -> list[tuple[int, float]]:
    """Each pair of neighbouring stages in turn ping-pongs tensors of each of ``sizes`` bytes,
    each side computing ``busy`` seconds before it sends (as a stage computes a micro-batch
    before it hands it on), while every other device computes. Returns ``(bytes, one-way
    seconds)`` medians for the pair this rank starts (half a round trip less the other side's
    compute), empty for the others."""
    rank, results = transport.rank, []
    for first, second in pairs:
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
    mesh: MeshShape,
    sizes: dict[str, Sequence[int]],
    repeats: int,
    busy: float,
    stall_timeout: float,
) -> dict[str, list[tuple[int, float]]]:
    """Task on every device of the mesh: the data all-reduces of ``sizes["reduce"]`` bytes
    (all groups at once), the tensor all-reduces of ``sizes["tensor"]`` bytes (all groups at
    once, each after ``busy`` seconds of compute), then the hand-offs of ``sizes["handoff"]``
    bytes between neighbouring stages (:func:`_time_handoffs`); an exchange the mesh does not
    have (its axis is 1) is left out. Returns this rank's ``(bytes, median seconds)``:
    ``reduce`` and ``tensor`` as it saw its groups' all-reduces, ``handoff`` for the pair it
    starts."""
    transport = PeerTransport(run_id, rank, addresses, device_names, stall_timeout)
    data = SubgroupTransport(transport, list(mesh.data_group(rank)))
    tensor = SubgroupTransport(transport, list(mesh.tensor_group(rank)))
    timed: dict[str, list[tuple[int, float]]] = {"reduce": [], "tensor": [], "handoff": []}
    try:
        # One untimed round first: opening channels and probing shared memory is not a cost
        # of any size.
        ring_barrier(transport, "calibrate/mesh/warm/barrier")
        for name, group in (("data", data), ("tensor", tensor)):
            if group.size > 1:
                allreduce(group, np.ones(group.size, np.float32), f"warm/{name}")
        if mesh.dp > 1:
            timed["reduce"] = timed_at_each_size(
                transport, sizes["reduce"], repeats, "mesh", lambda t, key: allreduce(data, t, key)
            )
        if mesh.tp > 1:
            timed["tensor"] = _time_tensor_allreduces(
                transport, tensor, sizes["tensor"], repeats, busy
            )
        if mesh.pp > 1:
            timed["handoff"] = _time_handoffs(
                transport, neighbours(mesh), sizes["handoff"], repeats, busy
            )
        # No rank drops the channels while a peer still hands a segment back through them.
        ring_barrier(transport, "calibrate/mesh/done")
    finally:
        device_service().forget(run_id)
    return timed


def measure_mesh(
    session: ClusterSession,
    mesh: MeshShape,
    largest: dict[str, int],
    busy: float = BUSY_SECONDS,
    repeats: int = REPEATS,
    stall_timeout: float = 60.0,
) -> dict[str, LinkFit]:
    """The session's mesh timed (:func:`time_mesh`) and fitted: ``{collective_key: fit}``, a
    ``ring`` per data group (up to ``largest["reduce"]`` bytes, the biggest bucket a device
    reduces) and a ``TENSOR_ALLREDUCE`` per tensor group (up to ``largest["tensor"]``, the
    biggest partial sum), each to its slowest rank, and a ``STAGE_HANDOFF`` per neighbouring
    pair, both directions (up to ``largest["handoff"]``, the biggest activation between
    stages)."""
    gathered = on_every_device(
        session,
        time_mesh,
        "mesh",
        mesh,
        {name: two_sizes(nbytes) for name, nbytes in largest.items()},
        repeats,
        busy,
        stall_timeout,
    )
    names = session.device_names
    fits = {}
    for kind, part, ranks in _reducing_groups(mesh):
        # A group's all-reduce ends when its slowest rank has the result.
        slowest: dict[int, float] = {}
        for rank in ranks:
            for nbytes, seconds in gathered[rank][part]:
                slowest[nbytes] = max(slowest.get(nbytes, 0.0), seconds)
        fits[collective_key(kind, [names[rank] for rank in ranks])] = fit_link(
            sorted(slowest.items())
        )
    for first, second in neighbours(mesh):
        fit = fit_link(sorted(gathered[first]["handoff"]))
        for pair in ((first, second), (second, first)):
            fits[collective_key(STAGE_HANDOFF, [names[rank] for rank in pair])] = fit
    return fits
