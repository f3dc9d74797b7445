"""Send/Recv between Dask workers: the collective ``Transport`` used inside tasks.

``send`` is an RPC to the peer worker's ``dtrain_send`` handler carrying the tensor as a
serialised frame (no pickling of array data, no scheduler hop); it returns once the peer has
stored it, so the sender may reuse its buffer. A NumPy tensor for a peer on the same host goes
through a shared-memory channel instead (``workbench/runtime/shared_memory_channel.py``): one
copy into a segment and a line in a FIFO, no RPC, and ``send`` returns without waiting for the
peer. Set ``DTRAIN_SHARED_MEMORY=0`` in the workers' environment to measure without it.

On GPU devices the tensors are device arrays. Between workers on one host they are staged
through host memory into the same channel (one device-to-host copy, one host-to-device copy on
the receiver); otherwise over TCP the device array is staged through host memory before it
goes to Dask's comms (whose CuPy serializers would need numba or rmm), and over UCX
(``--protocol ucx``) it goes as it is, moved device to device by distributed's CUDA
serializers (checked on every worker before the run starts). Every send
records its route, ``host-staged:shared-memory``, ``host-staged:tcp``, ``device:ucx`` (or, on
CPUs, ``shared-memory``, ``tcp``), and the events carry it.
``recv`` waits on the local mailbox and fails with an error naming the peer device and the
step when the peer stalls or dies; ``recv_into`` adds (or copies) a tensor straight out of the
sender's segment into a buffer of the caller's, which is how the ring all-reduce reduces.
"""

from __future__ import annotations

import os
import select
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from distributed.comm.addressing import get_address_host
from distributed.protocol import to_serialize
from distributed.utils import sync

from workbench.runtime.device_arrays import DeviceArrays
from workbench.runtime.shared_memory_channel import ChannelReceiver, SharedMessage, probe_path
from workbench.runtime.transport import StallError, apply_received
from workbench.runtime.worker_service import PROBE_HANDLER, SEND_HANDLER, device_service
from workbench.safe_io import ForeignPathError

# How long a wait on its own channels goes before it looks into the mailbox again.
OWN_CHANNEL_POLL_S = 0.05
# How long a thread with a core to itself (a pipeline stage, a parameter-server worker) polls
# its channel before it sleeps: most of its waits (a neighbour's action and hand-off, a pull's
# answer) are shorter, and a processor that slept computes the next action slower.
SPIN_BEFORE_SLEEP_S = 0.003


def route(on_device: bool, wire: str) -> str:
    """How a tensor travels over ``wire`` (``shared-memory``, ``tcp``, ``ucx``), as events
    name it.

    Examples
    --------
    >>> route(False, "tcp"), route(True, "shared-memory"), route(True, "ucx")
    ('tcp', 'host-staged:shared-memory', 'device:ucx')
    """
    if not on_device:
        return wire
    # UCX moves CUDA buffers without the host; the other wires go through host memory.
    return "device:ucx" if wire == "ucx" else f"host-staged:{wire}"


def wire_of(address: str) -> str:
    """``tcp`` for ``tcp://127.0.0.1:4000``: the comms a worker's address says it uses."""
    return address.split("://", 1)[0]


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
        device: DeviceArrays | None = None,
        shared_memory: bool | None = None,
        reads_own_channels: bool = False,
        spin_seconds: float = 0.0,
    ) -> None:
        """``shared_memory``: whether peers on this host may use the channels (default: unless
        ``DTRAIN_SHARED_MEMORY=0``); calibration turns it off to time Dask's RPCs.
        ``reads_own_channels``: the one thread that receives reads the channels' FIFOs
        itself while it waits, instead of the worker's event loop
        reading them and waking it: one wake-up per message instead of two.
        ``spin_seconds``: with ``reads_own_channels``, how long a wait polls its channel
        (handing the core to any other runnable thread between polls) before it sleeps. A
        processor that slept through a wait of a millisecond or more computes the next
        piece of work measurably slower (docs/benchmarks.md, "Pipelines and parameter
        servers: where each device's step goes"); a pipeline stage or a parameter-server worker,
        whose waits are mostly shorter than that, keeps its core awake."""
        self.run_id, self.rank, self.size = run_id, rank, len(addresses)
        self.device = device if device is not None else DeviceArrays.for_kind("cpu")
        self.routes: dict[int, str] = {}  # peer -> how the last tensor to or from it travelled
        self.addresses, self.device_names = list(addresses), list(device_names)
        self.stall_timeout = stall_timeout
        self.spin_seconds = spin_seconds
        self.step: int | None = None
        self.bytes_sent = self.bytes_received = 0
        self._in_flight: list = []
        self._service = device_service()
        self._worker = self._service.worker
        self._wire = wire_of(self._worker.address)  # tcp, ucx, ...
        enabled = os.environ.get("DTRAIN_SHARED_MEMORY", "1") != "0"
        if shared_memory is not None:
            enabled = shared_memory
        host = get_address_host(self._worker.address)
        # Peers on this host, whose channels may work; each is probed before its first send.
        self._shared_peers = {
            peer
            for peer, address in enumerate(self.addresses)
            if enabled and peer != rank and get_address_host(address) == host
        }
        self._probed: set[int] = set()
        channels = self._service.channels
        # The channels this rank reads itself, by peer (reads_own_channels).
        self.own_channels: dict[int, ChannelReceiver] = {}
        for peer in self._shared_peers:
            receiver = channels.listen(
                run_id, peer, rank, self._service.mailbox.put, on_loop=not reads_own_channels
            )
            if not receiver.on_loop:
                self.own_channels[peer] = receiver

    def readdress(self, peer: int, address: str) -> None:
        """``peer`` is now the worker at ``address`` (set up in place of one that was lost).
        Its tensors go over Dask's comms from now on: the channels between the two ranks
        were the lost process's, and a new process cannot take over its files."""
        self.addresses[peer] = address
        self._shared_peers.discard(peer)

    def _key(self, source: int, target: int, key: str) -> str:
        return f"{self.run_id}/{source}->{target}/{key}"

    def count_traffic(self, sent: int, received: int) -> None:
        self.bytes_sent += sent
        self.bytes_received += received

    def send(self, peer: int, key: str, array: Any) -> None:
        full_key = self._key(self.rank, peer, key)
        try:
            if self._send_shared(peer, full_key, array):
                self._record(peer, array, "shared-memory")
            else:
                self._record(peer, array, self._wire)
                sync(
                    self._worker.loop,
                    getattr(self._worker.rpc(self.addresses[peer]), SEND_HANDLER),
                    key=full_key,
                    payload=to_serialize(self.device.for_the_wire(array, self._wire)),
                )
        except ForeignPathError:
            raise  # not a stall: another user's object, named with its owner
        except Exception as error:
            raise StallError(
                f"step {self.step}: sending {key!r} to {self.device_names[peer]} failed: {error}"
            ) from error
        self.bytes_sent += int(array.nbytes)

    def send_packed(self, peer: int, key: str, parts: Sequence[Any]) -> None:
        """The concatenation of ``parts`` (each flattened, one dtype) to ``peer`` under
        ``key``: on one host written straight into the channel's segment, so no packed copy
        is made first (a parameter-server push, a shard's answer to a pull)."""
        in_host_memory = all(isinstance(part, np.ndarray) for part in parts)
        one_dtype = len({part.dtype for part in parts}) == 1
        applies = in_host_memory and one_dtype and self._channel_applies(peer, parts[0])
        full_key = self._key(self.rank, peer, key)
        try:
            channel = self._channel_to(peer) if applies else None
            if channel is not None:
                channel.send_packed(full_key, parts, self.stall_timeout)
        except ForeignPathError:
            raise
        except Exception as error:
            raise StallError(
                f"step {self.step}: sending {key!r} to {self.device_names[peer]} failed: {error}"
            ) from error
        if channel is None:  # packed first, then sent as any tensor is
            self.send(peer, key, self.device.xp.concatenate([p.reshape(-1) for p in parts]))
            return
        self._record_route(peer, False, "shared-memory")
        self.bytes_sent += sum(int(part.nbytes) for part in parts)

    def _send_shared(self, peer: int, full_key: str, array: Any) -> bool:
        """Send through the shared-memory channel to ``peer``; False when that path does not
        apply (not NumPy, another host)."""
        if not self._channel_applies(peer, array):
            return False
        channel = self._channel_to(peer)
        if channel is None:
            return False
        if not isinstance(array, np.ndarray):
            array = self.device.to_host(array)  # staged: the segment is host memory
        channel.send(full_key, array, self.stall_timeout)  # ChannelStalled names no peer
        return True

    def _channel_to(self, peer: int) -> Any:
        """The channel to ``peer`` once it is known to see this host's /dev/shm; None if it
        does not (TCP from now on)."""
        channel = self._service.channels.sender(self.run_id, self.rank, peer)
        if peer not in self._probed:
            # Same address, but does the peer see this host's /dev/shm? Asked once per peer.
            path = probe_path(self.run_id, self.rank, peer)
            rpc = self._worker.rpc(self.addresses[peer])
            if not sync(self._worker.loop, getattr(rpc, PROBE_HANDLER), path=path):
                self._shared_peers.discard(peer)
                return None
            self._probed.add(peer)
        return channel

    def _channel_applies(self, peer: int, array: Any) -> bool:
        return peer in self._shared_peers and not array.dtype.hasobject

    def _record(self, peer: int, array: Any, wire: str) -> None:
        self._record_route(peer, not isinstance(array, np.ndarray), wire)

    def _record_route(self, peer: int, on_device: bool, wire: str) -> None:
        self.routes[peer] = route(on_device, wire)

    def paths_taken(self) -> str:
        """The routes tensors to and from this rank have taken so far, e.g.
        ``shared-memory``."""
        return "+".join(sorted(set(self.routes.values())))

    def send_async(self, peer: int, key: str, array: Any) -> Any:
        """Start sending and return at once (a future); the caller must not modify ``array``
        until :meth:`flush`. Lets a pipeline stage compute while its activation travels."""
        import asyncio

        if self._channel_applies(peer, array):
            # The channel never waits for the peer: sending is already asynchronous.
            self.send(peer, key, array)
            return None
        full_key = self._key(self.rank, peer, key)
        self._record(peer, array, self._wire)
        rpc = self._worker.rpc(self.addresses[peer])
        payload = to_serialize(self.device.for_the_wire(array, self._wire))
        coroutine = getattr(rpc, SEND_HANDLER)(key=full_key, payload=payload)
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

    def deliver_from(self, peer: int, deliver: Callable[[str, Any], None]) -> None:
        """Hand what ``peer`` sends this rank to ``deliver(key, message)`` as it arrives (on
        the worker's event loop), instead of keeping it for :meth:`recv`: a service that
        answers messages (a parameter shard). ``message`` is for :meth:`accept`."""
        prefix = self._key(peer, self.rank, "")
        self._service.mailbox.route(
            prefix, lambda key, message: deliver(key[len(prefix) :], message)
        )

    def recv(self, peer: int, key: str, on_host: bool = False) -> Any:
        """The tensor, on this rank's device (a staged one is copied to it), or in host
        memory with ``on_host`` (a small header a program reads on the CPU)."""
        return self.accept(peer, self._take(peer, key), on_host)

    def accept(self, peer: int, message: Any, on_host: bool = False) -> Any:
        """What ``peer`` sent (a message routed to a service, or taken by :meth:`recv`) as an
        array of this rank's own, on its device or with ``on_host`` in host memory."""
        self._count(peer, message)
        shared = isinstance(message, SharedMessage)
        if on_host:
            return message.copy() if shared else self.device.to_host(message)
        if shared:
            return message.take(self.device.to_device)
        return self.device.adopt(message)  # a staged one arrives as a host array

    def lend(self, peer: int, message: Any) -> tuple[Any, Callable[[], None]]:
        """What ``peer`` sent, read in place where it can be (a shared-memory message on a
        CPU: no copy), and the call that hands it back once read; otherwise :meth:`accept`'s
        own copy, whose call does nothing."""
        if isinstance(message, SharedMessage) and not self.device.on_gpu:
            self._count(peer, message)
            return message.lend()
        return self.accept(peer, message), _nothing

    def recv_lent(self, peer: int, key: str) -> tuple[Any, Callable[[], None]]:
        """:meth:`recv`, read in place where it can be (:meth:`lend`)."""
        return self.lend(peer, self._take(peer, key))

    def recv_into(self, peer: int, key: str, out: Any, add_to: Any = None) -> None:
        """Receive a tensor shaped like ``out`` and store ``add_to + tensor`` (or the tensor)
        in ``out``; on CPUs from shared memory in one pass, without an intermediate copy."""
        message = self._take(peer, key)
        self._count(peer, message)
        if isinstance(message, SharedMessage) and self.device.on_gpu:
            message = message.take(self.device.to_device)  # staged: host -> device once
        if not isinstance(message, SharedMessage):
            apply_received(out, self.device.adopt(message), add_to)
        elif add_to is None:
            message.copy_into(out)
        else:
            message.add_into(out, add_to)

    def _take(self, peer: int, key: str) -> Any:
        full_key = self._key(peer, self.rank, key)
        try:
            if peer in self.own_channels:
                return self._take_reading(peer, full_key)
            message = self._service.mailbox.take(full_key, self.stall_timeout)
        except (TimeoutError, OSError):  # OSError: the run's channels were closed meanwhile
            raise StallError(
                f"step {self.step}: {self.device_names[self.rank]} waited {self.stall_timeout:g}s "
                f"for {key!r} from {self.device_names[peer]}, which stalled or died"
            ) from None
        return message

    def _take_reading(self, peer: int, full_key: str) -> Any:
        """:meth:`_take` from a peer whose channel this rank reads itself: what the peer
        announced goes into the mailbox, and the thread waits on the channel's FIFO."""
        mailbox, deadline = self._service.mailbox, time.monotonic() + self.stall_timeout
        receiver = self.own_channels[peer]
        spin_until = time.monotonic() + self.spin_seconds
        while True:
            found, message = mailbox.poll(full_key)
            if found:
                return message
            receiver.on_readable()
            found, message = mailbox.poll(full_key)
            if found:
                return message
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(full_key)
            while time.monotonic() < spin_until and not _readable(receiver.ready):
                os.sched_yield()  # polling, but any other thread that wants the core gets it
            # A message the peer sent over Dask's comms instead (it fell back to TCP) lands
            # in the mailbox without waking this wait: looked for again every poll.
            select.select([receiver.ready], [], [], min(left, OWN_CHANNEL_POLL_S))

    def _count(self, peer: int, message: Any) -> None:
        """Bytes and route of a message from ``peer``."""
        self.bytes_received += int(message.nbytes)
        wire = "shared-memory" if isinstance(message, SharedMessage) else self._wire
        self._record_route(peer, self.device.on_gpu, wire)


def _readable(descriptor: int) -> bool:
    return bool(select.select([descriptor], [], [], 0)[0])


def _nothing() -> None:
    """Handing back what was copied: nothing to do."""
