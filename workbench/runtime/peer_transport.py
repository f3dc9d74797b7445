"""Send/Recv between Dask workers: the collective ``Transport`` used inside tasks.

``send`` is an RPC to the peer worker's ``dtrain_send`` handler carrying the tensor as a
serialised frame (no pickling of array data, no scheduler hop); it returns once the peer has
stored it, so the sender may reuse its buffer. ``recv`` waits on the local mailbox and fails
with an error naming the peer device and the step when the peer stalls or dies.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from distributed.protocol import to_serialize
from distributed.utils import sync

from workbench.parallel.collectives.transport import StallError
from workbench.runtime.worker_service import SEND_HANDLER, device_service


class PeerTransport:
    """Rank ``rank`` of a group of workers (``addresses`` in rank order).

    Keys are prefixed with ``run_id`` so concurrent runs on one cluster never mix tensors.
    """

    def __init__(
        self,
        run_id: str,
        rank: int,
        addresses: Sequence[str],
        device_names: Sequence[str],
        stall_timeout: float,
    ) -> None:
        self.run_id, self.rank, self.size = run_id, rank, len(addresses)
        self.addresses, self.device_names = list(addresses), list(device_names)
        self.stall_timeout = stall_timeout
        self.step: int | None = None
        self.bytes_sent = self.bytes_received = 0
        self._in_flight: list = []
        self._service = device_service()

        self._worker = self._service.worker

    def _key(self, source: int, target: int, key: str) -> str:
        return f"{self.run_id}/{source}->{target}/{key}"

    def send(self, peer: int, key: str, array: Any) -> None:
        full_key = self._key(self.rank, peer, key)
        rpc = self._worker.rpc(self.addresses[peer])
        try:
            sync(
                self._worker.loop,
                getattr(rpc, SEND_HANDLER),
                key=full_key,
                payload=to_serialize(array),
            )
        except Exception as error:
            raise StallError(
                f"step {self.step}: sending {key!r} to {self.device_names[peer]} failed: {error}"
            ) from error
        self.bytes_sent += int(array.nbytes)

    def send_async(self, peer: int, key: str, array: Any) -> Any:
        """Start sending and return at once (a future); the caller must not modify ``array``
        until :meth:`flush`. Lets a pipeline stage compute while its activation travels."""
        import asyncio

        full_key = self._key(self.rank, peer, key)
        rpc = self._worker.rpc(self.addresses[peer])
        coroutine = getattr(rpc, SEND_HANDLER)(key=full_key, payload=to_serialize(array))
        future = asyncio.run_coroutine_threadsafe(coroutine, self._worker.loop.asyncio_loop)
        self._in_flight.append((future, peer, key))
        self.bytes_sent += int(array.nbytes)
        return future

    def flush(self) -> None:
        """Wait for every :meth:`send_async` to be delivered (or fail naming the peer)."""
        in_flight, self._in_flight = self._in_flight, []
        for future, peer, key in in_flight:
            try:
                future.result(timeout=self.stall_timeout)
            except Exception as error:
                raise StallError(
                    f"step {self.step}: sending {key!r} to {self.device_names[peer]} failed: "
                    f"{error!r}"
                ) from error

    def recv(self, peer: int, key: str) -> Any:
        try:
            array = self._service.mailbox.take(self._key(peer, self.rank, key), self.stall_timeout)
        except TimeoutError:
            raise StallError(
                f"step {self.step}: {self.device_names[self.rank]} waited {self.stall_timeout:g}s "
                f"for {key!r} from {self.device_names[peer]}, which stalled or died"
            ) from None
        self.bytes_received += int(array.nbytes)
        return array
