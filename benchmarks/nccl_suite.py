"""The ``nccl`` suite: NCCL all-reduce between GPU workers, beside the GPUs' own memory
bandwidth.

On a cluster of N GPU workers (``LocalCUDACluster``, one GPU each) every worker allocates S
bytes of float32 on its GPU, and the suite alternates, inside the workers after a barrier, a
timed NCCL all-reduce of the buffer (the workbench's ``--allreduce nccl``, slowest rank) and a
timed device-to-device copy of S bytes on each GPU (its memory bandwidth: S read + S written).
Reported: NCCL's algorithm bandwidth S / t and bus bandwidth 2(N-1)/N x S / t (what
nccl-tests calls algbw and busbw), and the copy's GB/s, medians over repetitions. It needs GPU
devices; elsewhere it says why it did not run.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from benchmarks.distributed_suites import spread
from benchmarks.flags import (
    Flag,
    mebibytes,
    positive,
    settings_suite,
)
from benchmarks.report import span, table
from benchmarks.suite import Progress


@dataclass(frozen=True)
class NcclSettings:
    megabytes: float = 64.0
    workers: int = 2
    repeats: int = 10
    warmup: int = 2
    stall_timeout: float = 120.0


def measure_on_worker(
    run_id: str, rank: int, addresses: list[str], device_names: list[str], settings: dict
) -> dict[str, list[float]]:
    """A task pinned to rank ``rank``'s GPU worker: alternately one timed NCCL all-reduce and
    one timed device-to-device copy of the buffer."""
    from workbench.parallel.collectives.nccl import NcclAllReduce
    from workbench.runtime.device_arrays import DeviceArrays
    from workbench.runtime.peer_transport import PeerTransport
    from workbench.runtime.worker_service import device_service

    device = DeviceArrays.for_kind("gpu", device_names[rank])
    transport = PeerTransport(
        run_id, rank, addresses, device_names, settings["stall_timeout"], device
    )
    xp, elements = device.xp, int(settings["megabytes"] * 2**20) // 4
    if device.runtime is None:
        raise RuntimeError(f"{device_names[rank]} has no GPU runtime")
    nccl = NcclAllReduce(transport, device.runtime, settings["stall_timeout"])
    try:
        source = xp.full(elements, float(rank + 1), dtype=np.float32)
        work, copy = xp.empty_like(source), xp.empty_like(source)
        reduce_seconds, copy_seconds = [], []
        for index in range(settings["warmup"] + settings["repeats"]):
            work[...] = source
            device.synchronize()
            nccl(xp.zeros(1, dtype=np.float32))  # a barrier
            device.synchronize()
            start = time.perf_counter()
            nccl(work)
            device.synchronize()
            reduced = time.perf_counter() - start
            expected = transport.size * (transport.size + 1) / 2
            if float(work[0]) != expected or float(work[-1]) != expected:
                raise AssertionError(f"rank {rank}: NCCL returned {float(work[0])}")
            start = time.perf_counter()
            copy[...] = source
            device.synchronize()
            copied = time.perf_counter() - start
            if index >= settings["warmup"]:
                reduce_seconds.append(reduced)
                copy_seconds.append(copied)
        return {"allreduce": reduce_seconds, "copy": copy_seconds}
    finally:
        nccl.close()
        device_service().forget(run_id)


def run_nccl_suite(settings: NcclSettings, progress: Progress) -> dict[str, Any]:
    from workbench.parallel.dispatch import submit_each
    from workbench.runtime.cluster import start_cluster
    from workbench.runtime.devices import DeviceError

    nbytes = int(settings.megabytes * 2**20) // 4 * 4
    result: dict[str, Any] = {"suite": "nccl", "settings": asdict(settings), "bytes": nbytes}
    try:
        with start_cluster(settings.workers, "gpu") as session:
            progress(f"nccl: {settings.workers} GPU workers, {nbytes / 2**20:.0f} MiB")
            arguments = [
                (session.run_id, rank, session.addresses, session.device_names, asdict(settings))
                for rank in range(settings.workers)
            ]
            futures = submit_each(session, "bench", "nccl", None, measure_on_worker, arguments)
            per_rank = session.client.gather(futures)
    except DeviceError as error:
        return {**result, "available": False, "reason": str(error)}
    reduce_s = [max(times) for times in zip(*(r["allreduce"] for r in per_rank))]
    copy_s = [max(times) for times in zip(*(r["copy"] for r in per_rank))]
    median_reduce, median_copy = spread(reduce_s)["median"], spread(copy_s)["median"]
    workers = settings.workers
    return {
        **result,
        "available": True,
        "allreduce_ms": spread(reduce_s, scale=1e3),
        "algorithm_gb_per_s": nbytes / median_reduce / 1e9,
        "bus_gb_per_s": 2 * (workers - 1) / workers * nbytes / median_reduce / 1e9,
        "copy_ms": spread(copy_s, scale=1e3),
        "memory_gb_per_s": 2 * nbytes / median_copy / 1e9,  # read + write
    }


add_flags, run = settings_suite(
    NcclSettings,
    run_nccl_suite,
    megabytes=Flag(("--mib", "--allreduce-mib"), "tensor size S in MiB", mebibytes),
    workers=Flag(("--workers",), "GPU workers", positive),
    repeats=Flag(("--transfers",), "timed repetitions", positive),
)


def render(result: dict[str, Any]) -> str:
    settings = result["settings"]
    heading = (
        f"### nccl: NCCL all-reduce of {result['bytes'] / 2**20:.0f} MiB float32 between "
        f"{settings['workers']} GPU workers, beside each GPU's memory bandwidth"
    )
    if not result["available"]:
        return f"{heading}\n\nnot run: {result['reason']}"
    ms, copy = result["allreduce_ms"], result["copy_ms"]
    columns = ("all-reduce ms (median)", "min - max", "algbw GB/s", "busbw GB/s")
    figures = (
        f"{ms['median']:.2f}",
        span(ms),
        f"{result['algorithm_gb_per_s']:.1f}",
        f"{result['bus_gb_per_s']:.1f}",
        f"{copy['median']:.2f}",
        f"{result['memory_gb_per_s']:.1f}",
    )
    return "\n".join(
        [
            heading,
            "",
            *table((*columns, "device copy ms", "memory GB/s"), "r" * 6, [figures]),
            "",
            f"- method: {settings['repeats']} repetitions after {settings['warmup']} untimed, "
            "each a one-element NCCL barrier, a timed in-place NCCL all-reduce (slowest rank, "
            "stream synchronised) and a timed device-to-device copy of the same bytes; medians",
            "- busbw = 2(N-1)/N x S / t (nccl-tests' bus bandwidth); memory GB/s = 2 S / t",
        ]
    )
