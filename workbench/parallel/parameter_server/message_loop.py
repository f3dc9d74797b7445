"""The one thread a parameter shard answers on: the workers' messages and the client's calls,
one at a time, in the order they came.

The thread reads the workers' shared-memory channels itself (``PeerTransport`` with
``reads_own_channels``): a worker's message wakes this thread and nothing else, where the
worker's event loop would first wake, read the channel and then wake the shard's thread. What
comes another way (a worker's message over Dask's comms, delivered on the event loop; a call
of the client's) is queued and the thread woken through a pipe.
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import select
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from workbench.runtime.peer_transport import PeerTransport

Result = TypeVar("Result")
log = logging.getLogger(__name__)


class MessageLoop:
    """Runs ``handle(peer, key, message)`` for every message routed to it (see
    :meth:`deliver_from`) and every callable :meth:`submit` ted, on one thread."""

    def __init__(self, transport: PeerTransport, name: str) -> None:
        self.transport = transport
        self._queue: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()
        self._wake_read, self._wake_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def deliver_from(self, peer: int, handle: Callable[[int, str, Any], None]) -> None:
        """Hand what ``peer`` sends to ``handle(peer, key, message)`` on this loop's thread."""

        def arrived(key: str, message: Any) -> None:
            if threading.current_thread() is self._thread:  # read from a channel here
                handle(peer, key, message)
            else:  # over Dask's comms, on the event loop
                self._enqueue(lambda: handle(peer, key, message))

        self.transport.deliver_from(peer, arrived)

    def submit(self, work: Callable[[], Result]) -> Future[Result]:
        """``work()`` on this loop's thread, in turn with the messages."""
        done: Future[Result] = Future()

        def run() -> None:
            if done.set_running_or_notify_cancel():
                try:
                    done.set_result(work())
                except BaseException as error:
                    done.set_exception(error)

        self._enqueue(run)
        return done

    def stop(self) -> None:
        """End the thread (the run is over); what is queued is dropped."""
        self._stopping = True
        self._wake()

    def _enqueue(self, work: Callable[[], None]) -> None:
        self._queue.put(work)
        self._wake()

    def _wake(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):  # full: it is awake anyway
            os.write(self._wake_write, b"\0")

    def _run(self) -> None:
        try:
            while not self._stopping:
                self._wait()
                self._drain_queue()
        except OSError:  # the run's channels were closed under it: the run is over
            pass
        finally:
            for descriptor in (self._wake_read, self._wake_write):
                with contextlib.suppress(OSError):
                    os.close(descriptor)

    def _wait(self) -> None:
        channels = self.transport.own_channels
        for receiver in channels.values():  # what came while the thread was busy
            receiver.on_readable()
        if not self._queue.empty():
            return
        fifos = [receiver.ready for receiver in channels.values()]
        ready, _, _ = select.select([*fifos, self._wake_read], [], [], 1.0)
        if self._wake_read in ready:
            with contextlib.suppress(BlockingIOError):
                os.read(self._wake_read, 4096)
        for receiver in channels.values():
            if receiver.ready in ready:
                receiver.on_readable()

    def _drain_queue(self) -> None:
        while not self._stopping:
            try:
                work = self._queue.get_nowait()
            except queue.Empty:
                return
            work()
