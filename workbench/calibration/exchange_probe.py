"""Timing a parameter-server exchange as the workers run it, for the planner's calibration.

A worker pulls every shard's variables (a Dask RPC per shard, answered on the shard's event
loop), computes its gradients, and pushes each shard its part (``worker_loop.py``). Each RPC
pays serialisation, the hand-off from the worker's thread into its event loop, the socket
copies, and the shard's answering while the other workers call it too; and while one worker
computes, the shards may be answering another, on the same cores. Ping-pongs between idle
pairs of devices (the ``rpc`` wire) and nodes timed without the shards show neither. Here
every worker does exactly that loop at once (the step's own graph between its pulls and
pushes), against probe shards that answer a pull with a ready tensor and drop what is pushed
(the run's own shards are not set up yet, and a probe's push must not touch the variables),
at the run's sizes and at tiny ones. The client fits latency + bytes / bandwidth per RPC to
the medians (:func:`workbench.costs.fit_link`), stored under
:func:`workbench.costs.collective_key` with the kinds :data:`EXCHANGE_KINDS`, and how much
longer the gradients took in the loop than alone (``Calibration.compute_stretch``).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
from distributed import get_worker
from distributed.protocol import to_serialize
from distributed.utils import sync

from workbench.calibration.probe import graph_runner
from workbench.costs import LinkFit, collective_key, fit_link
from workbench.ir import Graph
from workbench.runtime.cluster import ClusterSession
from workbench.runtime.worker_service import CALL_HANDLER, SERVICE_NAME, RpcHandler

# A worker's pulls from every shard, and its pushes to every shard: one RPC per shard each.
EXCHANGE_KINDS = ("ps-pull", "ps-push")
TINY_BYTES = 1024  # per shard: the RPCs' fixed cost, the fit's second size


class ProbeShard:
    """What a shard answers during the probe, doing what a run's shard does per RPC
    (``shard_service.py``): a pull is answered on the shard's one update thread with a fresh
    copy of the bytes asked for (a run's shard packs its variables into one array there); a
    push is deserialised by the comm, as a real one is, and dropped."""

    def __init__(self) -> None:
        self.tensors: dict[int, np.ndarray] = {}
        self.thread = ThreadPoolExecutor(1, thread_name_prefix="ps-probe")

    def _packed(self, nbytes: int) -> np.ndarray:
        return self.tensors.setdefault(nbytes, np.ones(nbytes // 4, np.float32)).copy()

    async def handle_pull(self, nbytes: int) -> dict[str, Any]:
        values = await asyncio.get_running_loop().run_in_executor(self.thread, self._packed, nbytes)
        return {"values": to_serialize(values)}

    async def handle_push(self, gradients: Any) -> dict[str, Any]:
        return {"taken": True}

    def rpc_handlers(self) -> dict[str, RpcHandler]:
        return {"pull": self.handle_pull, "push": self.handle_push}

    def close(self) -> None:
        self.thread.shutdown(wait=False)


def _install(run_id: str, dask_worker=None) -> None:
    """On a shard's event loop (``client.run``): a probe shard under ``run_id``."""
    dask_worker.plugins[SERVICE_NAME].runs[run_id] = ProbeShard()


def _forget(run_id: str, dask_worker=None) -> None:
    service = dask_worker.plugins[SERVICE_NAME]
    shard = service.runs.get(run_id)
    if isinstance(shard, ProbeShard):
        shard.close()
    service.forget(run_id)


@dataclass(frozen=True)
class ExchangeTiming:
    """One worker's medians: per round, ``(bytes pulled, pull seconds, push seconds)``;
    the gradients' seconds alone and in the loop."""

    rounds: list[tuple[int, float, float]]
    compute_alone: float
    compute_in_loop: float


def time_exchange(
    run_id: str,
    shard_addresses: Sequence[str],
    rounds: Sequence[Sequence[int]],
    repeats: int,
    graph: Graph,
) -> ExchangeTiming:
    """Task on every worker: ``graph`` (the worker's gradients) ``repeats`` times alone, then
    for each of ``rounds`` (bytes per shard; the last: the run's) ``repeats`` times a
    worker's step: a pull from every shard, ``graph``, a push of what came back to every
    shard."""
    worker = get_worker()
    gradients = graph_runner(graph)

    def call(address: str, method: str, **arguments: Any) -> Any:
        rpc = getattr(worker.rpc(address), CALL_HANDLER)
        return sync(worker.loop, rpc, run_id=run_id, method=method, arguments=arguments)

    def timed(work: Callable[[], Any]) -> float:
        start = time.perf_counter()
        work()
        return time.perf_counter() - start

    def step(shard_bytes: Sequence[int]) -> tuple[float, float, float]:
        pulled: list[Any] = []

        def pull() -> None:
            for address, nbytes in zip(shard_addresses, shard_bytes):
                pulled.append(call(address, "pull", nbytes=nbytes)["values"])

        def push() -> None:
            for address, values in zip(shard_addresses, pulled):
                # A worker packs its gradients for each shard into one array: a copy.
                call(address, "push", gradients=to_serialize(np.array(values)))

        return timed(pull), timed(gradients), timed(push)

    step([TINY_BYTES] * len(shard_addresses))  # untimed: opens the comms, first touches
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
) -> tuple[dict[str, LinkFit], float]:
    """Every worker's steps against every shard at once (:func:`time_exchange`), the pulls
    and pushes fitted per RPC: ``{collective_key(kind, devices): fit}`` for each of
    :data:`EXCHANGE_KINDS` (``devices``: the workers then the shards), and the gradients'
    stretch in the loop (the slowest worker's over its time alone, at least 1)."""
    run_id = f"{session.run_id}-calibrate-ps"
    shard_addresses = [session.addresses[rank] for rank in shard_ranks]
    rounds = [[TINY_BYTES] * len(shard_ranks), [max(n, TINY_BYTES * 2) for n in shard_bytes]]
    session.client.run(_install, run_id, workers=shard_addresses)
    try:
        futures = [
            session.client.submit(
                time_exchange,
                run_id,
                shard_addresses,
                rounds,
                repeats,
                graph,
                workers=[session.addresses[rank]],
                pure=False,
                key=f"dtrain-calibrate-ps-{rank}-{session.run_id}",
            )
            for rank in worker_ranks
        ]
        gathered = session.client.gather(futures)
    finally:
        session.client.run(_forget, run_id, workers=shard_addresses)
    # A synchronous step waits for its slowest worker: the largest time per size, per RPC.
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
