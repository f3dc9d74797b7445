"""Timing a parameter-server exchange as the workers run it, for the planner's calibration.

A worker asks every shard for its variables, computes its gradients, and pushes each shard
its part, every one a message through the Send/Recv transport (``worker_loop.py``,
``envelopes.py``): on one host a shared-memory channel, answered on the shard's own thread.
Each costs the copies into and out of a segment, the wake-ups of the shard's event loop and
thread and of the worker's, and the shard's answering while the other workers call it too;
and while one worker computes, the shards may be answering another, on the same cores.
Ping-pongs between idle pairs of devices and nodes timed without the shards show neither.
Here every worker does exactly that loop at once (the step's own graph between its pulls and
pushes), against probe shards that answer a pull with a ready tensor of the size asked and
acknowledge what is pushed without applying it (the run's own shards are not set up yet, and
a probe's push must not touch the variables), at the run's sizes and at tiny ones. The
client fits latency + bytes / bandwidth per message exchange to the medians
(:func:`workbench.costs.fit_link`), stored under :func:`workbench.costs.collective_key` with
the kinds :data:`EXCHANGE_KINDS`, and how much longer the gradients took in the loop than
alone (``Calibration.compute_stretch``).
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.calibration.probe import graph_runner
from workbench.costs import LinkFit, collective_key, fit_link
from workbench.ir import Graph
from workbench.parallel.parameter_server.envelopes import (
    DENSE,
    NO_PAYLOAD,
    PULL,
    ack_header,
    ack_key,
    grant_header,
    grant_key,
    open_envelope,
    pull_key,
    push_key,
    values_key,
)
from workbench.parallel.parameter_server.message_loop import MessageLoop
from workbench.runtime.cluster import ClusterSession
from workbench.runtime.peer_transport import PeerTransport
from workbench.runtime.worker_service import SERVICE_NAME, device_service

# A worker's pulls from every shard, and its pushes to every shard: one exchange per shard.
EXCHANGE_KINDS = ("ps-pull", "ps-push")
TINY_BYTES = 1024  # per shard: the exchanges' fixed cost, the fit's second size


@dataclass(frozen=True)
class ProbePlace:
    """Where the probe's processes are: the session's addresses and device names."""

    run_id: str
    addresses: tuple[str, ...]
    device_names: tuple[str, ...]
    stall_timeout: float

    def transport(self, rank: int) -> PeerTransport:
        # Read by the one thread that receives, as a run's workers and shards do.
        return PeerTransport(
            self.run_id,
            rank,
            self.addresses,
            self.device_names,
            self.stall_timeout,
            reads_own_channels=True,
        )


class ProbeShard:
    """What a shard answers during the probe, doing what a run's shard does per message
    (``shard_service.py``), on its one thread (a :class:`MessageLoop`, as a run's shard): a
    pull (whose wanted version is, here, the bytes wanted) is answered with that many bytes
    sent from a ready tensor (a run's shard sends its variables), a push is taken out of the
    transport and acknowledged."""

    def __init__(self, place: ProbePlace, rank: int, worker_ranks: Sequence[int]) -> None:
        self.tensors: dict[int, np.ndarray] = {}
        self.transport = place.transport(rank)
        self.loop = MessageLoop(self.transport, "ps-probe")
        for worker in worker_ranks:
            self.loop.deliver_from(worker, self._answer)

    def _answer(self, worker: int, key: str, message: Any) -> None:
        envelope = open_envelope(key)
        self.transport.accept(worker, message)
        step, token = envelope.step, envelope.token
        if envelope.kind == PULL:
            nbytes = envelope.version
            values = self.tensors.setdefault(nbytes, np.ones(nbytes // 4, np.float32))
            self.transport.send(worker, grant_key(step, token), grant_header(step, False))
            self.transport.send(worker, values_key(step, token), values)
        else:
            self.transport.send(worker, ack_key(step, token), ack_header(0, False, step))

    def stop_serving(self) -> None:
        self.loop.stop()


def _install(place: ProbePlace, rank: int, worker_ranks: Sequence[int]) -> None:
    """Task on a shard's worker: a probe shard under the probe's run id."""
    device_service().runs[place.run_id] = ProbeShard(place, rank, worker_ranks)


def _forget(run_id: str, dask_worker=None) -> None:
    service = dask_worker.plugins[SERVICE_NAME]
    service.forget(run_id)  # a probe shard's thread ends with it


@dataclass(frozen=True)
class ExchangeTiming:
    """One worker's medians: per round, ``(bytes pulled, pull seconds, push seconds)``;
    the gradients' seconds alone and in the loop."""

    rounds: list[tuple[int, float, float]]
    compute_alone: float
    compute_in_loop: float


def time_exchange(
    place: ProbePlace,
    rank: int,
    shard_ranks: Sequence[int],
    rounds: Sequence[Sequence[int]],
    repeats: int,
    graph: Graph,
) -> ExchangeTiming:
    """Task on every worker (``rank``): ``graph`` (the worker's gradients) ``repeats`` times
    alone, then for each of ``rounds`` (bytes per shard; the last: the run's) ``repeats``
    times a worker's step: a pull from every shard, ``graph``, a push of what came back to
    every shard."""
    transport = place.transport(rank)
    gradients = graph_runner(graph)
    token = uuid.uuid4().hex[:8]
    steps_taken = iter(range(1_000_000))

    def timed(work: Callable[[], Any]) -> float:
        start = time.perf_counter()
        work()
        return time.perf_counter() - start

    def step(shard_bytes: Sequence[int]) -> tuple[float, float, float]:
        pulled: list[Any] = []
        at = next(steps_taken)

        def pull() -> None:
            for shard, nbytes in zip(shard_ranks, shard_bytes):
                transport.send(shard, pull_key(at, nbytes, token), NO_PAYLOAD)
            for shard in shard_ranks:
                transport.recv(shard, grant_key(at, token), on_host=True)
                pulled.append(transport.recv(shard, values_key(at, token)))

        def push() -> None:
            for shard, values in zip(shard_ranks, pulled):
                transport.send(shard, push_key(at, at, token, DENSE), values)
            for shard in shard_ranks:
                transport.recv(shard, ack_key(at, token), on_host=True)

        return timed(pull), timed(gradients), timed(push)

    step([TINY_BYTES] * len(shard_ranks))  # untimed: opens the channels, first touches
    alone = statistics.median(timed(gradients) for _ in range(repeats))
    results, computes = [], ()
    for shard_bytes in rounds:
        steps = [step(shard_bytes) for _ in range(repeats)]
        pulls, computes, pushes = zip(*steps)
        results.append((sum(shard_bytes), statistics.median(pulls), statistics.median(pushes)))
    # The gradients in the loop of the last round: the run's own sizes.
    return ExchangeTiming(results, alone, statistics.median(computes))


def measure_exchange(
    session: ClusterSession,
    worker_ranks: Sequence[int],
    shard_ranks: Sequence[int],
    shard_bytes: Sequence[int],
    graph: Graph,
    repeats: int = 5,
    stall_timeout: float = 60.0,
) -> tuple[dict[str, LinkFit], float]:
    """Every worker's steps against every shard at once (:func:`time_exchange`), the pulls
    and pushes fitted per exchange with one shard: ``{collective_key(kind, devices): fit}``
    for each of :data:`EXCHANGE_KINDS` (``devices``: the workers then the shards), and the
    gradients' stretch in the loop (the slowest worker's over its time alone, at least 1)."""
    run_id = f"{session.run_id}-calibrate-ps"
    place = ProbePlace(run_id, tuple(session.addresses), tuple(session.device_names), stall_timeout)
    rounds = [[TINY_BYTES] * len(shard_ranks), [max(n, TINY_BYTES * 2) for n in shard_bytes]]
    client = session.client
    try:
        # A task, not ``client.run``: the probe shard listens through its worker's service.
        installed = [
            client.submit(
                _install,
                place,
                rank,
                tuple(worker_ranks),
                workers=[session.addresses[rank]],
                pure=False,
                key=f"dtrain-calibrate-ps-shard-{rank}-{session.run_id}",
            )
            for rank in shard_ranks
        ]
        client.gather(installed)
        futures = [
            client.submit(
                time_exchange,
                place,
                rank,
                tuple(shard_ranks),
                rounds,
                repeats,
                graph,
                workers=[session.addresses[rank]],
                pure=False,
                key=f"dtrain-calibrate-ps-{rank}-{session.run_id}",
            )
            for rank in worker_ranks
        ]
        gathered = client.gather(futures)
    finally:
        # Every process of the probe let go of its channels and the probe's directory.
        involved = [session.addresses[rank] for rank in [*worker_ranks, *shard_ranks]]
        client.run(_forget, run_id, workers=involved)
    # A synchronous step waits for its slowest worker: the largest time per size, per shard.
    calls = len(shard_ranks)
    slowest: dict[str, dict[int, float]] = {kind: {} for kind in EXCHANGE_KINDS}
    for timing in gathered:
        for nbytes, pull, push in timing.rounds:
            for kind, seconds in zip(EXCHANGE_KINDS, (pull, push)):
                per_call = nbytes // calls
                slowest[kind][per_call] = max(slowest[kind].get(per_call, 0.0), seconds / calls)
    devices = [session.device_names[rank] for rank in [*worker_ranks, *shard_ranks]]
    fits = {
        collective_key(kind, devices): fit_link(sorted(points.items()))
        for kind, points in slowest.items()
    }
    stretch = max(timing.compute_in_loop / timing.compute_alone for timing in gathered)
    return fits, max(stretch, 1.0)
