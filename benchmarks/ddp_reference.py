"""The PyTorch DDP peer: the reference MLP trained data-parallel the way PyTorch's own tutorial
does it.

``torch.multiprocessing.spawn`` starts one process per rank; each joins a ``gloo`` process group
over TCP on 127.0.0.1, wraps :class:`~benchmarks.torch_reference.TorchMLP`'s
``nn.Sequential`` in ``DistributedDataParallel`` (default 25 MiB buckets, gradient all-reduce
overlapped with backward) and runs plain SGD on synthetic tensors shaped like the workbench's
``synthetic`` batches (each rank its half of the global batch). Rank 0 times ``steps`` steps
after ``warmup`` untimed ones, with a barrier on each side so both ranks start and end the
window together, and reports samples/s over the global batch. Every rank first fixes glibc's
malloc thresholds as every benchmark process and every workbench device does
(:func:`~benchmarks.timing.steady_allocator`).

``processes=1`` runs the same step in one process, without a process group or DDP: the
single-process context row.
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks.timing import steady_allocator
from benchmarks.torch_reference import import_torch


@dataclass(frozen=True)
class ReferenceRun:
    """What every PyTorch peer trains: the reference MLP, its batch, steps and seed."""

    global_batch: int = 256
    hidden: tuple[int, ...] = (512, 512)
    inputs: int = 784
    classes: int = 10
    steps: int = 200
    warmup: int = 20
    learning_rate: float = 0.01
    seed: int = 0
    threads: int = 1  # torch.set_num_threads in every process


@dataclass(frozen=True)
class DDPSettings(ReferenceRun):
    processes: int = 2


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# A gloo rank now and then aborts in its C++ teardown ("terminate called without an active
# exception") although every figure was measured; the launch is then tried again, up to this
# many times in all, each with a fresh port.
LAUNCH_ATTEMPTS = 3


def finish_rank(distributed: Any) -> None:
    """End a rank once its figures are on disk: a last barrier so no peer is still talking,
    then leave the process without tearing down gloo's threads (the teardown is what aborts
    now and then, and the process ends anyway)."""
    distributed.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def spawn_ranks(function: Any, arguments: tuple, processes: int, result_paths: list[str]) -> None:
    """Run ``function(rank, *arguments, port)`` in ``processes`` fresh processes, trying again
    (fresh port, result files cleared) when a rank dies before writing its ``result_paths``."""
    torch: Any = import_torch()  # these run only once the caller found torch installed
    for attempt in range(1, LAUNCH_ATTEMPTS + 1):
        for path in result_paths:
            if os.path.exists(path):
                os.unlink(path)
        try:
            torch.multiprocessing.spawn(
                function, args=(*arguments, free_port()), nprocs=processes, join=True
            )
            return
        except torch.multiprocessing.ProcessExitedException as error:
            written = all(os.path.exists(p) and os.path.getsize(p) for p in result_paths)
            if written:
                return  # died after measuring: the figures stand
            if attempt == LAUNCH_ATTEMPTS:
                raise RuntimeError(
                    f"the PyTorch peer failed {LAUNCH_ATTEMPTS} times: {error}"
                ) from error


def initial_parameters(settings: ReferenceRun) -> dict[str, np.ndarray]:
    """The workbench's initial parameters for this seed (DDP also broadcasts rank 0's)."""
    from workbench.models import mlp

    model = mlp((settings.inputs,), settings.classes, settings.hidden)
    return model.init_parameters(settings.seed, "float32")


def _train(rank: int, settings: DDPSettings, result_path: str, port: int) -> None:
    """One rank: join the group, wrap the model in DDP, warm up, time, write the figures."""
    steady_allocator()  # the malloc thresholds of every benchmark process and workbench device
    torch: Any = import_torch()  # these run only once the caller found torch installed
    torch.set_num_threads(settings.threads)
    from benchmarks.torch_reference import TorchMLP

    distributed = settings.processes > 1
    if distributed:
        torch.distributed.init_process_group(
            "gloo",
            init_method=f"tcp://127.0.0.1:{port}",
            rank=rank,
            world_size=settings.processes,
        )
    try:
        reference = TorchMLP(initial_parameters(settings), settings.learning_rate, "cpu", torch)
        model = reference.model
        if distributed:
            model = torch.nn.parallel.DistributedDataParallel(model)
        optimizer = torch.optim.SGD(model.parameters(), lr=settings.learning_rate)
        per_rank = settings.global_batch // settings.processes
        generator = torch.Generator().manual_seed(settings.seed * 1000 + rank)
        x = torch.rand((per_rank, settings.inputs), generator=generator)
        y = torch.randint(0, settings.classes, (per_rank,), generator=generator)

        def step() -> Any:
            optimizer.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            return loss

        for _ in range(settings.warmup):
            step()
        if distributed:
            torch.distributed.barrier()
        start = time.perf_counter()
        for _ in range(settings.steps):
            loss = step()
        if distributed:
            torch.distributed.barrier()
        seconds = time.perf_counter() - start
        if rank == 0:
            with open(result_path, "w", encoding="utf-8") as out:
                out.write(f"{seconds!r} {float(loss.detach())!r}")
        if distributed:
            finish_rank(torch.distributed)
    finally:
        if distributed and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


def run_ddp(settings: DDPSettings) -> dict[str, float]:
    """Train ``settings.steps`` timed steps in ``settings.processes`` fresh processes; returns
    ``ms_per_step``, ``samples_per_second`` (global batch over the mean step) and the last loss.

    Examples
    --------
    >>> figures = run_ddp(DDPSettings(processes=1, global_batch=8, hidden=(4,), steps=2,
    ...                               warmup=1))
    >>> sorted(figures), figures["samples_per_second"] > 0
    (['final_loss', 'ms_per_step', 'samples_per_second'], True)
    """
    torch = import_torch()
    if torch is None:
        raise RuntimeError("PyTorch is not installed (pip install 'dtrain-workbench[bench]')")
    if settings.global_batch % settings.processes:
        raise ValueError("the global batch must split evenly over the processes")
    return timed_peer(_train, settings, settings.processes, "dtrain-ddp-")


def timed_peer(function: Any, settings: ReferenceRun, processes: int, prefix: str) -> dict:
    """Run ``function(rank, settings, result_path, port)`` on ``processes`` fresh processes,
    one of which writes ``seconds loss`` of ``settings.steps`` timed steps to ``result_path``;
    returns ``ms_per_step``, ``samples_per_second`` (the global batch over the mean step) and
    ``final_loss``."""
    handle, result_path = tempfile.mkstemp(prefix=prefix, suffix=".txt")
    os.close(handle)
    try:
        spawn_ranks(function, (settings, result_path), processes, [result_path])
        with open(result_path, encoding="utf-8") as result:
            seconds, loss = (float(part) for part in result.read().split())
    finally:
        if os.path.exists(result_path):
            os.unlink(result_path)
    per_step = seconds / settings.steps
    return {
        "ms_per_step": per_step * 1e3,
        "samples_per_second": settings.global_batch / per_step,
        "final_loss": loss,
    }


def _gloo_rank(
    rank: int, processes: int, nbytes: int, repeats: int, warmup: int, path: str, port: int
) -> None:
    """One rank of :func:`run_gloo_collectives`: alternately a timed ``all_reduce`` and a
    timed one-way send rank 0 -> 1 (with a one-element acknowledgement, as the workbench's
    send returns once the peer has stored the tensor), each after a barrier."""
    steady_allocator()
    torch: Any = import_torch()  # these run only once the caller found torch installed
    torch.set_num_threads(1)
    distributed = torch.distributed
    distributed.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=processes
    )
    try:
        values = torch.full((nbytes // 4,), float(rank + 1))
        payload, ack = torch.ones(nbytes // 4), torch.zeros(1)
        reduce_seconds, send_seconds = [], []
        for index in range(warmup + repeats):
            work = values.clone()
            distributed.barrier()
            start = time.perf_counter()
            distributed.all_reduce(work)
            reduced = time.perf_counter() - start
            distributed.barrier()
            start = time.perf_counter()
            if rank == 0:
                distributed.send(payload, 1)
                distributed.recv(ack, 1)
            elif rank == 1:
                distributed.recv(payload, 0)
                distributed.send(ack, 0)
            sent = time.perf_counter() - start
            if index >= warmup:
                reduce_seconds.append(reduced)
                send_seconds.append(sent)
        with open(f"{path}.{rank}", "w", encoding="utf-8") as out:
            out.write(" ".join(map(repr, reduce_seconds)) + "\n")
            out.write(" ".join(map(repr, send_seconds)) + "\n")
        finish_rank(distributed)
    finally:
        if distributed.is_initialized():
            distributed.destroy_process_group()


def run_gloo_collectives(
    processes: int, nbytes: int, repeats: int, warmup: int
) -> dict[str, list[float]]:
    """PyTorch's own peer for the all-reduce suite: ``torch.distributed.all_reduce`` (gloo,
    float32, ``nbytes``) over ``processes`` fresh processes and one-way sends rank 0 -> 1,
    timed the way the workbench's are. Returns per repetition the slowest rank's all-reduce
    seconds (``allreduce``) and rank 0's send seconds (``send``)."""
    torch = import_torch()
    if torch is None:
        raise RuntimeError("PyTorch is not installed (pip install 'dtrain-workbench[bench]')")
    handle, path = tempfile.mkstemp(prefix="dtrain-gloo-", suffix=".txt")
    os.close(handle)
    try:
        rank_paths = [f"{path}.{rank}" for rank in range(processes)]
        spawn_ranks(_gloo_rank, (processes, nbytes, repeats, warmup, path), processes, rank_paths)
        ranks = []
        for rank in range(processes):
            with open(f"{path}.{rank}", encoding="utf-8") as result:
                ranks.append([[float(v) for v in line.split()] for line in result])
    finally:
        for name in [path, *(f"{path}.{rank}" for rank in range(processes))]:
            if os.path.exists(name):
                os.unlink(name)
    return {
        "allreduce": [max(times) for times in zip(*(r[0] for r in ranks))],
        "send": ranks[0][1],
    }
