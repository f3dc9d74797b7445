"""The PyTorch RPC parameter-server peer: the reference MLP trained by workers that pull the
parameters from, and push their gradients to, a server process, as PyTorch's own RPC
parameter-server tutorials build it.

``torch.multiprocessing.spawn`` starts a server and ``workers`` trainers, joined by
``torch.distributed.rpc`` (its default TensorPipe backend) on 127.0.0.1. The server holds the
reference MLP's parameters (the workbench's initial ones). Each trainer step:

- ``sync``: ``rpc_sync(server, update_and_fetch, gradients)``; the server's
  ``@rpc.functions.async_execution`` handler sums the gradients of every trainer, applies
  their mean with SGD once all of them arrived, and answers each trainer's future with the new
  parameters (the design of "Batch-Updating Parameter Server" in PyTorch's tutorial on
  asynchronous execution);
- ``async``: the server applies each trainer's gradient as it arrives and answers with the
  parameters it now has (Hogwild-style, the other variant of the same tutorial).

A trainer computes the forward, backward and loss of its share of the global batch on the
parameters it received, on synthetic tensors shaped like the workbench's ``synthetic``
batches. Every process first fixes glibc's malloc thresholds as every benchmark process and
workbench device does (:func:`~benchmarks.timing.steady_allocator`). Trainer 0 times
``steps`` steps after ``warmup`` untimed ones.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from benchmarks.ddp_reference import ReferenceRun, initial_parameters, timed_peer
from benchmarks.timing import steady_allocator
from benchmarks.torch_reference import import_torch

MODES = ("sync", "async")
SERVER = "server"


@dataclass(frozen=True)
class ParameterServerSettings(ReferenceRun):
    workers: int = 2
    mode: str = "sync"  # one of MODES


class _Server:
    """The parameters and their updates, in the server process (one instance, reached from
    the RPC handlers below through the module global, as the tutorial's server object is)."""

    def __init__(self, settings: ParameterServerSettings, torch: Any) -> None:
        from benchmarks.torch_reference import TorchMLP

        reference = TorchMLP(initial_parameters(settings), settings.learning_rate, "cpu", torch)
        self.torch = torch
        self.parameters = [p.detach().clone() for p in reference.model.parameters()]
        self.workers, self.learning_rate = settings.workers, settings.learning_rate
        self.lock = threading.Lock()
        self.pending: list[Any] = []  # the futures of this round's trainers (sync)
        self.sums: list[Any] | None = None

    def apply(self, gradients: list[Any], scale: float) -> None:
        with self.torch.no_grad():
            for parameter, gradient in zip(self.parameters, gradients):
                parameter.add_(gradient, alpha=-self.learning_rate * scale)

    def snapshot(self) -> list[Any]:
        return [parameter.clone() for parameter in self.parameters]


_server: _Server | None = None


def _fetch() -> list[Any]:
    assert _server is not None
    with _server.lock:
        return _server.snapshot()


def _update_async(gradients: list[Any]) -> list[Any]:
    assert _server is not None
    with _server.lock:
        _server.apply(gradients, 1.0)
        return _server.snapshot()


def _async_execution(function: Any) -> Any:
    """``rpc.functions.async_execution(function)`` where PyTorch is installed (without it the
    peer refuses to run before any process starts)."""
    try:
        from torch.distributed.rpc.functions import async_execution
    except ImportError:
        return function
    return async_execution(function)


@_async_execution
def _update_sync(gradients: list[Any]) -> Any:
    """Answered once every trainer's gradient of this round is in (see the module doc)."""
    assert _server is not None
    server, torch = _server, _server.torch
    future = torch.futures.Future()
    with server.lock:
        if server.sums is None:
            server.sums = [gradient.clone() for gradient in gradients]
        else:
            for total, gradient in zip(server.sums, gradients):
                total.add_(gradient)
        server.pending.append(future)
        if len(server.pending) == server.workers:
            server.apply(server.sums, 1.0 / server.workers)
            answer, waiting = server.snapshot(), server.pending
            server.sums, server.pending = None, []
            for each in waiting:
                each.set_result(answer)
    return future


def _process(rank: int, settings: ParameterServerSettings, result_path: str, port: int) -> None:
    """Rank 0 serves the parameters; ranks 1.. train."""
    steady_allocator()
    torch: Any = import_torch()  # these run only once the caller found torch installed
    torch.set_num_threads(settings.threads)
    from torch.distributed import rpc

    global _server
    if rank == 0:
        _server = _Server(settings, torch)
    options = rpc.TensorPipeRpcBackendOptions(
        init_method=f"tcp://127.0.0.1:{port}", num_worker_threads=16
    )
    name = SERVER if rank == 0 else f"trainer{rank - 1}"
    rpc.init_rpc(name, rank=rank, world_size=settings.workers + 1, rpc_backend_options=options)
    try:
        if rank > 0:
            _train(rank - 1, settings, result_path, torch, rpc)
    finally:
        rpc.shutdown()  # waits for every process: the server serves until the trainers end


def _train(trainer: int, settings: ParameterServerSettings, result_path: str, torch, rpc) -> None:
    from benchmarks.torch_reference import TorchMLP

    model = TorchMLP(initial_parameters(settings), settings.learning_rate, "cpu", torch).model
    parameters = list(model.parameters())
    share = settings.global_batch // settings.workers
    generator = torch.Generator().manual_seed(settings.seed * 1000 + trainer)
    x = torch.rand((share, settings.inputs), generator=generator)
    y = torch.randint(0, settings.classes, (share,), generator=generator)
    handler = _update_sync if settings.mode == "sync" else _update_async
    current = rpc.rpc_sync(SERVER, _fetch)

    def step(current: list[Any]) -> tuple[list[Any], Any]:
        with torch.no_grad():
            for parameter, value in zip(parameters, current):
                parameter.copy_(value)
        model.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        gradients = [parameter.grad for parameter in parameters]
        return rpc.rpc_sync(SERVER, handler, args=(gradients,)), loss.detach()

    for _ in range(settings.warmup):
        current, loss = step(current)
    start = time.perf_counter()
    for _ in range(settings.steps):
        current, loss = step(current)
    seconds = time.perf_counter() - start
    if trainer == 0:
        with open(result_path, "w", encoding="utf-8") as out:
            out.write(f"{seconds!r} {float(loss)!r}")


def run_torch_parameter_server(settings: ParameterServerSettings) -> dict[str, float]:
    """Train ``settings.steps`` timed steps on a server and ``settings.workers`` trainers,
    fresh processes; returns ``ms_per_step``, ``samples_per_second`` (global batch over trainer
    0's mean step) and trainer 0's last loss."""
    torch = import_torch()
    if torch is None:
        raise RuntimeError("PyTorch is not installed (pip install 'dtrain-workbench[bench]')")
    if settings.mode not in MODES:
        allowed = ", ".join(MODES)
        raise ValueError(f"mode must be one of {allowed}, got {settings.mode!r}")
    if settings.global_batch % settings.workers:
        raise ValueError("the global batch must split evenly over the workers")
    return timed_peer(_process, settings, settings.workers + 1, "dtrain-ps-")
