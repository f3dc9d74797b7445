"""The per-worker device service (TF's worker service, as a Dask ``WorkerPlugin``).

Installed once per worker, it owns what must outlive a single task: the mailbox that peers'
Send messages land in (through the ``dtrain_send`` comm handler registered on the worker's
server, so tensors move worker to worker without the scheduler or the client), and the
per-run device state (variables, compiled partitions) that strategies keep resident between
steps.
"""

from __future__ import annotations

from typing import Any

from distributed.diagnostics.plugin import WorkerPlugin

from workbench.runtime.mailbox import Mailbox

SERVICE_NAME = "dtrain-device-service"
SEND_HANDLER = "dtrain_send"


class DeviceService(WorkerPlugin):
    name = SERVICE_NAME
    idempotent = True  # registering again (a second run on one cluster) keeps the first

    def setup(self, worker) -> None:
        # Created here, on the worker: the plugin object itself is pickled to get there.
        self.mailbox = Mailbox()
        self.runs: dict[str, Any] = {}
        self.worker = worker
        worker.handlers[SEND_HANDLER] = self._receive

    def teardown(self, worker) -> None:
        worker.handlers.pop(SEND_HANDLER, None)
        self.runs.clear()

    def _receive(self, key: str, payload: Any) -> str:
        self.mailbox.put(key, payload)
        return "ok"


def device_service():
    """The service of the worker running the calling task."""
    from distributed import get_worker

    worker = get_worker()
    try:
        return worker.plugins[SERVICE_NAME]
    except KeyError:
        raise RuntimeError(f"worker {worker.address} has no {SERVICE_NAME}") from None
