"""The ``allreduce`` suite: the workbench's ring all-reduce against the bound its own
point-to-point bandwidth sets.

A ring all-reduce of S bytes over N ranks sends 2(N-1)/N x S from every rank, in 2(N-1)
steps in which every rank sends to its right neighbour and receives from its left at once. With
a point-to-point bandwidth B, no all-reduce over the same links finishes faster than
2(N-1)/N x S / B. The suite measures, in the same run and on the same Dask workers
(``PeerTransport``: on one host a shared-memory channel; across hosts an RPC to the peer
worker's ``dtrain_send`` handler), B as a one-way send of S bytes from rank 0 to rank 1 (timed
by the sender until the receiver, having taken the tensor, acknowledges it with one element)
and the ring all-reduce of S bytes float32, timed inside the workers after a barrier (the
slowest rank's time: the collective is done when every rank is). Sends and all-reduces
alternate, so both see the same machine; medians over repetitions. The fraction of the bound
is ``bound / all-reduce time``. A ring shift (every rank sends S/N right while receiving from
the left) shows what sending and receiving at once costs here.

Peer, per size and process count: PyTorch's ``torch.distributed.all_reduce`` over gloo, timed
the same way against the bound from its own one-way sends
(:func:`benchmarks.ddp_reference.run_gloo_collectives`).
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from benchmarks import ddp_reference, torch_reference
from benchmarks.distributed_suites import spread
from benchmarks.flags import (
    Flag,
    mebibytes,
    positive,
    positive_list,
    settings_suite,
)
from benchmarks.machine import usable_cores
from benchmarks.report import span, table, verdict
from benchmarks.suite import Progress

TARGET_FRACTION_OF_BOUND = 0.70
PEER_LABEL = "PyTorch gloo all_reduce"
REFERENCE_GRADIENT_BYTES = 669_706 * 4  # the reference MLP's float32 gradients (2.55 MiB)


@dataclass(frozen=True)
class AllreduceSettings:
    megabytes: float = 64.0  # S, in MiB
    workers: tuple[int, ...] = (2, 4)
    repeats: int = 10  # timed all-reduces and timed sends, alternating
    warmup: int = 2
    gradient_row: bool = True  # also S = the reference MLP's gradients, on 2 workers
    stall_timeout: float = 120.0


def _barrier(transport, key: str) -> None:
    """Every rank waits for every other: an all-reduce of one element."""
    from workbench.parallel.collectives import allreduce

    allreduce(transport, np.zeros(1, np.float32), key)


def measure_on_worker(
    run_id: str,
    rank: int,
    addresses: list[str],
    device_names: list[str],
    nbytes: int,
    repeats: int,
    warmup: int,
    stall_timeout: float,
) -> dict[str, Any]:
    """A Dask task pinned to rank ``rank``'s worker: alternately one timed ring all-reduce of
    ``nbytes`` (every rank), one timed one-way send of ``nbytes`` (rank 0 to rank 1) and one
    timed ring shift (every rank sends ``nbytes / N`` to its right neighbour and receives from
    its left at once: one step of the ring, as the all-reduce's transfers run). Returns this
    rank's seconds per all-reduce and per shift, and (rank 0) per send."""
    from workbench.runtime.peer_transport import PeerTransport
    from workbench.runtime.worker_service import device_service

    transport = PeerTransport(run_id, rank, addresses, device_names, stall_timeout)
    try:
        return _timed_transfers(transport, nbytes, repeats, warmup)
    finally:
        device_service().forget(run_id)  # its shared-memory segments and pending tensors


def _timed_transfers(transport: Any, nbytes: int, repeats: int, warmup: int) -> dict[str, Any]:
    from benchmarks.timing import steady_allocator
    from workbench.parallel.collectives import ring_allreduce
    from workbench.runtime.transport import recv_into

    steady_allocator()  # malloc thresholds as in the gloo peer's processes
    rank = transport.rank
    size = transport.size
    values = np.full(nbytes // 4, float(rank + 1), dtype=np.float32)
    # In place into a buffer refilled before each repetition, and received into a buffer of
    # the receiver's: what torch.distributed.all_reduce and recv do in the gloo peer.
    work = values.copy()
    payload = np.ones(nbytes // 4, dtype=np.float32)
    received = np.empty_like(payload)
    chunk = payload[: nbytes // 4 // size]
    right, left = (rank + 1) % size, (rank - 1) % size
    reduce_seconds, send_seconds, shift_seconds = [], [], []
    for index in range(warmup + repeats):
        np.copyto(work, values)
        _barrier(transport, f"bar{index}/a")
        start = time.perf_counter()
        total = ring_allreduce(transport, work, f"ring{index}", inplace=True)
        reduced = time.perf_counter() - start
        if total[0] != size * (size + 1) / 2 or total[-1] != total[0]:
            raise AssertionError(f"rank {rank}: the all-reduce returned {total[0]}, {total[-1]}")
        _barrier(transport, f"bar{index}/b")
        start = time.perf_counter()
        # Delivered means taken by the receiver (a shared-memory send returns before that), so
        # the sender's clock stops at a one-element acknowledgement.
        if rank == 0:
            transport.send(1, f"p2p{index}", payload)
            transport.recv(1, f"ack{index}")
        elif rank == 1:
            recv_into(transport, 0, f"p2p{index}", received)
            transport.send(0, f"ack{index}", payload[:1])
        sent = time.perf_counter() - start
        _barrier(transport, f"bar{index}/c")
        start = time.perf_counter()
        transport.send(right, f"shift{index}", chunk)
        recv_into(transport, left, f"shift{index}", received[: chunk.size])
        shifted = time.perf_counter() - start
        if index >= warmup:
            reduce_seconds.append(reduced)
            send_seconds.append(sent)
            shift_seconds.append(shifted)
    return {
        "allreduce": reduce_seconds,
        "shift": shift_seconds,
        "send": send_seconds if rank == 0 else [],
    }


def measure(workers: int, nbytes: int, settings: AllreduceSettings) -> dict[str, list[float]]:
    """Start a local cluster of ``workers`` devices and run :func:`measure_on_worker` on each.
    All-reduce and shift times are the slowest rank's per repetition."""
    from workbench.runtime.cluster import start_cluster

    with start_cluster(workers, "cpu") as session:
        futures = [
            session.client.submit(
                measure_on_worker,
                session.run_id,
                rank,
                session.addresses,
                session.device_names,
                nbytes,
                settings.repeats,
                settings.warmup,
                settings.stall_timeout,
                workers=[address],
                pure=False,
                key=f"dtrain-bench-allreduce-{nbytes}-{rank}-{session.run_id}",
            )
            for rank, address in enumerate(session.addresses)
        ]
        results = session.client.gather(futures)
    slowest = {
        name: [max(times) for times in zip(*(r[name] for r in results))]
        for name in ("allreduce", "shift")
    }
    return {**slowest, "send": results[0]["send"]}


def _row(workers: int, nbytes: int, times: dict[str, list[float]], cores: int) -> dict[str, Any]:
    allreduce_s = spread(times["allreduce"])["median"]
    send_s = spread(times["send"])["median"]
    bandwidth = nbytes / send_s
    wire_bytes = 2 * (workers - 1) / workers * nbytes
    bound_s = wire_bytes / bandwidth
    fraction = bound_s / allreduce_s
    # The ring's 2(N-1) steps at the speed this machine really shifts a ring (sending and
    # receiving at once, which on few cores is slower than one send alone).
    shift_bound_s = 2 * (workers - 1) * spread(times["shift"])["median"]
    oversubscribed = workers > cores
    return {
        "workers": workers,
        "bytes": nbytes,
        "mib": nbytes / 2**20,
        "oversubscribed": oversubscribed,
        "allreduce_ms": spread(times["allreduce"], scale=1e3),
        "send_ms": spread(times["send"], scale=1e3),
        "p2p_gb_per_s": bandwidth / 1e9,
        "bus_gb_per_s": wire_bytes / allreduce_s / 1e9,
        "bound_ms": bound_s * 1e3,
        "fraction_of_bound": fraction,
        "shift_ms": spread(times["shift"], scale=1e3),
        "shift_bound_ms": shift_bound_s * 1e3,
        "fraction_of_shift_bound": shift_bound_s / allreduce_s,
        "target_min_fraction": TARGET_FRACTION_OF_BOUND,
        # Judged only when every worker has a core: oversubscribed rings measure time-sharing.
        "met": None if oversubscribed else fraction >= TARGET_FRACTION_OF_BOUND,
    }


def _peer_row(workers: int, nbytes: int, times: dict[str, list[float]]) -> dict[str, Any]:
    """PyTorch gloo's all-reduce against the same bound, from its own one-way sends."""
    allreduce_s = spread(times["allreduce"])["median"]
    bandwidth = nbytes / spread(times["send"])["median"]
    bound_s = 2 * (workers - 1) / workers * nbytes / bandwidth
    return {
        "label": PEER_LABEL,
        "available": True,
        "allreduce_ms": spread(times["allreduce"], scale=1e3),
        "send_ms": spread(times["send"], scale=1e3),
        "p2p_gb_per_s": bandwidth / 1e9,
        "bound_ms": bound_s * 1e3,
        "fraction_of_bound": bound_s / allreduce_s,
    }


def run_allreduce_suite(settings: AllreduceSettings, progress: Progress) -> dict[str, Any]:
    cores = usable_cores()
    missing = torch_reference.unavailable_reason("cpu")
    nbytes = int(settings.megabytes * 2**20) // 4 * 4
    cases = [(workers, nbytes) for workers in settings.workers]
    if settings.gradient_row:
        cases.append((2, REFERENCE_GRADIENT_BYTES))
    rows = []
    for workers, size in cases:
        progress(f"{workers} workers, {size / 2**20:.2f} MiB: {settings.repeats} repetitions")
        row = _row(workers, size, measure(workers, size, settings), cores)
        progress(f"  workbench: {row['fraction_of_bound']:.0%} of the bound")
        if missing is None:
            peer = ddp_reference.run_gloo_collectives(
                workers, size, settings.repeats, settings.warmup
            )
            row["gloo"] = _peer_row(workers, size, peer)
            # Throughput ratio: gloo's time over the workbench's (above 1: the workbench is faster).
            row["workbench_over_gloo_throughput"] = (
                row["gloo"]["allreduce_ms"]["median"] / row["allreduce_ms"]["median"]
            )
            progress(f"  gloo: {row['gloo']['fraction_of_bound']:.0%} of its bound")
        else:
            row["gloo"] = {"label": PEER_LABEL, "available": False, "reason": missing}
            row["workbench_over_gloo_throughput"] = None
        rows.append(row)
    return {
        "suite": "allreduce",
        "settings": {
            **asdict(settings),
            "dtype": "float32",
            "algorithm": "ring",
            "usable_cores": cores,
            "cpu_count": os.cpu_count(),
        },
        "rows": rows,
    }


add_flags, run = settings_suite(
    AllreduceSettings,
    run_allreduce_suite,
    megabytes=Flag(("--mib", "--allreduce-mib"), "tensor size S in MiB", mebibytes),
    workers=Flag(("--workers", "--allreduce-workers"), "worker counts", positive_list),
    repeats=Flag(("--transfers",), "timed repetitions", positive),
)


def _table_row(row: dict[str, Any]) -> tuple[object, ...]:
    ms = row["allreduce_ms"]
    return (
        f"{row['workers']}{' (oversubscribed)' if row['oversubscribed'] else ''}",
        f"{row['mib']:.2f}",
        f"{ms['median']:.1f}",
        span(ms, 1),
        f"{row['send_ms']['median']:.1f}",
        f"{row['p2p_gb_per_s']:.2f}",
        f"{row['bound_ms']:.1f}",
        f"**{row['fraction_of_bound']:.0%}**",
        f"{row['shift_ms']['median']:.1f}",
        f"{row['shift_bound_ms']:.1f}",
        f"{row['fraction_of_shift_bound']:.0%}",
        f"{row['bus_gb_per_s']:.2f}",
    )


def _peer_table_row(row: dict[str, Any]) -> tuple[object, ...]:
    peer = row["gloo"]
    if not peer["available"]:
        return (row["workers"], f"{row['mib']:.2f}", peer["reason"], *[""] * 6)
    return (
        row["workers"],
        f"{row['mib']:.2f}",
        f"{peer['allreduce_ms']['median']:.1f}",
        span(peer["allreduce_ms"], 1),
        f"{peer['send_ms']['median']:.1f}",
        f"{peer['p2p_gb_per_s']:.2f}",
        f"{peer['bound_ms']:.1f}",
        f"{peer['fraction_of_bound']:.0%}",
        f"{row['workbench_over_gloo_throughput']:.2f}",
    )


def render(result: dict[str, Any]) -> str:
    settings = result["settings"]
    columns = (
        *("workers", "S (MiB)", "all-reduce ms (median)", "min - max", "one-way send ms"),
        *("B (GB/s)", "bound ms", "of bound", "ring shift ms", "2(N-1) shifts ms"),
    )
    peer_columns = (
        *("processes", "S (MiB)", "gloo all-reduce ms", "min - max"),
        *("one-way send ms", "B (GB/s)", "bound ms", "of bound"),
    )
    lines = [
        "### allreduce: ring all-reduce of float32 between Dask workers (PeerTransport), "
        f"against the bound 2(N-1)/N x S / B; {settings['usable_cores']} usable cores",
        "",
        *table((*columns, "of that", "bus GB/s"), "r" * 12, map(_table_row, result["rows"])),
        "",
        "Peer, same sizes and process counts, timed the same way: PyTorch "
        "`torch.distributed.all_reduce` (gloo), bound from its own one-way sends.",
        "",
        *table(
            (*peer_columns, "workbench / gloo throughput"),
            "r" * 9,
            map(_peer_table_row, result["rows"]),
        ),
        "",
    ]
    for row in result["rows"]:
        judged = verdict(row["met"], "not judged (more workers than cores)")
        lines.append(
            f"- {row['workers']} workers, {row['mib']:.2f} MiB: {row['fraction_of_bound']:.0%} "
            f"of the bound (target >= {row['target_min_fraction']:.0%}: {judged})"
        )
    lines += [
        f"- method: per size and worker count a fresh local cluster; {settings['repeats']} "
        f"repetitions after {settings['warmup']} untimed, each a barrier + timed ring "
        "all-reduce (slowest rank), a barrier + timed one-way send rank 0 -> 1 (B = S / "
        "send time), a barrier + timed ring shift of S/N (slowest rank); medians",
        "- ring shift: every rank sends S/N to its right neighbour while receiving from its "
        "left, one step of the ring; 2(N-1) of them are the all-reduce's transfers at the speed "
        "this machine achieves sending and receiving at once, so 'of that' is the share of the "
        "all-reduce spent moving bytes (the rest: copying, adding, waiting)",
        "- bus GB/s: 2(N-1)/N x S over the all-reduce time, what each rank moved per second "
        "(NCCL's busbw); B is what one send alone achieves",
    ]
    return "\n".join(lines)
