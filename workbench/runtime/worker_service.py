"""The per-worker device service (TF's worker service, as a Dask ``WorkerPlugin``).

Installed once per worker, it owns what must outlive a single task: the mailbox that peers'
Send messages land in (through the ``dtrain_send`` comm handler registered on the worker's
server, so tensors move worker to worker without the scheduler or the client, or through the
shared-memory channels of peers on the same host), and the
per-run device state (variables, compiled partitions) that strategies keep resident between
steps.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol, runtime_checkable

from distributed.diagnostics.plugin import WorkerPlugin

from workbench.runtime.host_dataset import forget_dataset
from workbench.runtime.mailbox import Mailbox
from workbench.runtime.shared_memory import unlink_run_segments
from workbench.runtime.shared_memory_channel import ChannelRegistry, sees_probe

SERVICE_NAME = "dtrain-device-service"
SEND_HANDLER = "dtrain_send"
PROBE_HANDLER = "dtrain_probe_shared"  # whether this worker sees a peer's shared memory
CALL_HANDLER = "dtrain_call"

# A method a run's resident object answers over RPC: keyword arguments in, a reply out.
RpcHandler = Callable[..., Awaitable[Any]]


@runtime_checkable
class RpcTarget(Protocol):
    """A run's resident object that answers calls (a parameter shard): the methods it
    answers, by name. Only these can be called; nothing else of the object is reachable."""

    def rpc_handlers(self) -> Mapping[str, RpcHandler]: ...


class UnknownRpcMethod(LookupError):
    """A call named a method its target does not answer."""


def dispatch_call(target: object, method: str, arguments: Mapping[str, Any]) -> Awaitable[Any]:
    """``method`` of ``target``'s handler table, called with ``arguments``. A target that
    answers no calls, or a method not in its table, is refused by name."""
    if not isinstance(target, RpcTarget):
        raise UnknownRpcMethod(f"{type(target).__name__} answers no calls (asked for {method!r})")
    handlers = target.rpc_handlers()
    handler = handlers.get(method)
    if handler is None:
        raise UnknownRpcMethod(
            f"{type(target).__name__} has no method {method!r}; "
            f"it answers {', '.join(sorted(handlers))}"
        )
    return handler(**arguments)


class DeviceService(WorkerPlugin):
    name = SERVICE_NAME
    idempotent = True  # registering again (a second run on one cluster) keeps the first

    def setup(self, worker) -> None:
        worker.handlers[CALL_HANDLER] = self._call
        # Created here, on the worker: the plugin object itself is pickled to get there.
        self.mailbox = Mailbox()
        self.runs: dict[str, Any] = {}
        self.worker = worker
        self.channels = ChannelRegistry(worker.loop.asyncio_loop)
        worker.handlers[SEND_HANDLER] = self._receive
        worker.handlers[PROBE_HANDLER] = self._probe_shared

    def teardown(self, worker) -> None:
        for handler in (SEND_HANDLER, PROBE_HANDLER, CALL_HANDLER):
            worker.handlers.pop(handler, None)
        for run_id in list(self.runs):
            self.forget(run_id)
        self.channels.discard()  # also channels of tasks that kept no run state

    def forget(self, run_id: str) -> None:
        """Drop a run's resident state, data set, pending tensors and shared-memory
        segments."""
        state = self.runs.pop(run_id, None)
        stop_serving = getattr(state, "stop_serving", None)
        if callable(stop_serving):  # a service with a thread of its own (a parameter shard)
            stop_serving()
        forget_dataset(run_id)
        self.mailbox.discard(run_id)
        self.channels.discard(run_id)
        # Lets go of the run's directory; the last of its processes to do so removes it,
        # with whatever a peer that died left there.
        unlink_run_segments(run_id)

    def _receive(self, key: str, payload: Any) -> str:
        self.mailbox.put(key, payload)
        return "ok"

    def _probe_shared(self, path: str) -> bool:
        return sees_probe(path)

    async def _call(self, run_id: str, method: str, arguments: dict) -> Any:
        """RPC into a run's resident object (a parameter shard answering pulls and pushes)."""
        target = self.runs.get(run_id)
        if target is None:
            raise RuntimeError(f"run {run_id} has no state on {self.worker.address}")
        return await dispatch_call(target, method, arguments)


def device_service():
    """The service of the worker running the calling task."""
    from distributed import get_worker

    worker = get_worker()
    try:
        return worker.plugins[SERVICE_NAME]
    except KeyError:
        raise RuntimeError(f"worker {worker.address} has no {SERVICE_NAME}") from None
