"""A one-way shared-memory channel between two workers on one host (NCCL's and gloo's SHM
transport, for Dask workers).

Over loopback TCP every byte is copied by the kernel on both sides, and a Dask RPC costs about
a millisecond through two event loops. Here the sender copies the tensor once into a segment
from its pool for this peer and writes a one-line header (key, segment, dtype, shape) into a
FIFO; the receiver's event loop reads the header and puts a :class:`SharedMessage` (a view
of the segment) into the mailbox. The task that takes it either copies it out or, in a
collective, adds it straight into its own buffer (one pass over the bytes instead of two),
and then hands the segment back through a second FIFO.

A sender never waits for the receiver: when every segment of its pool is still held, it makes
another one. So a program that sends several tensors before receiving any (a pipeline stage,
a partitioned graph) cannot deadlock on the channel, and a ring step's send overlaps its
receive. Only past ``MAX_SEGMENTS_IN_FLIGHT`` held segments (a receiver that stopped taking)
does the sender wait, and then no longer than the stall timeout.

Names start with the run's prefix (:func:`workbench.runtime.shared_memory.segment_prefix`),
so sweeping a finished run removes its FIFOs and segments, including those of a worker that
died.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import threading
import time
import uuid
from collections.abc import Callable
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import numpy as np

from workbench.runtime.shared_memory import (
    SHM_DIRECTORY,
    close_and_unlink,
    has_room,
    segment_prefix,
)

MAX_SEGMENTS_IN_FLIGHT = 64


class ChannelStalled(TimeoutError):
    """The receiver held every segment past the stall timeout."""


def channel_name(run_id: str, source: int, target: int) -> str:
    return f"{segment_prefix(run_id)}-{source}-{target}"


def _open_fifo(path: str) -> int:
    """Open (creating if needed) a FIFO for both reading and writing, without blocking: Linux
    allows O_RDWR on a FIFO, so neither side waits for the other to open it and a reader
    never sees end-of-file when a writer goes away."""
    with contextlib.suppress(FileExistsError):
        os.mkfifo(path, 0o600)
    return os.open(path, os.O_RDWR | os.O_NONBLOCK)


def _write_all(fd: int, data: bytes, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while data:
        try:
            data = data[os.write(fd, data) :]
        except BlockingIOError:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([], [fd], [], left)[1]:
                raise ChannelStalled("the receiver stopped reading its channel") from None


def _read_lines(fd: int, pending: bytearray) -> list[str]:
    """Whatever complete lines are in the FIFO now; a partial line stays in ``pending``."""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            break
        if not chunk:
            break
        pending += chunk
    *lines, rest = pending.split(b"\n")
    pending[:] = rest
    return [line.decode() for line in lines]


class ChannelSender:
    """The sending end, in the sender's process: a pool of reusable segments."""

    def __init__(self, run_id: str, source: int, target: int) -> None:
        self.name = channel_name(run_id, source, target)
        self._ready = _open_fifo(os.path.join(SHM_DIRECTORY, f"{self.name}-ready"))
        self._done = _open_fifo(os.path.join(SHM_DIRECTORY, f"{self.name}-done"))
        self._returned = bytearray()
        self._free: dict[str, SharedMemory] = {}
        self._held: dict[str, SharedMemory] = {}
        self._lock = threading.Lock()
        # Only this process makes it: a peer that sees it shares this host's /dev/shm.
        self._probe = SharedMemory(name=f"{self.name}-probe", create=True, size=1)

    def send(self, key: str, array: np.ndarray, timeout: float) -> None:
        """Copy ``array`` into a free segment and tell the receiver; returns without waiting
        for it (the caller may reuse ``array`` at once)."""
        with self._lock:
            self._collect_returned(0.0)
            retired: list[str] = []
            segment = self._segment_for(max(int(array.nbytes), 1), retired, timeout)
            view = np.ndarray(array.shape, dtype=array.dtype, buffer=segment.buf)
            np.copyto(view, array, casting="no")
            del view  # no exported buffer may outlive the segment
            self._held[segment.name] = segment
            header = {
                "key": key,
                "segment": segment.name,
                "dtype": array.dtype.str,
                "shape": list(array.shape),
                "retired": retired,  # segments the receiver may close (grown past)
            }
            _write_all(self._ready, (json.dumps(header) + "\n").encode(), timeout)

    def _segment_for(self, nbytes: int, retired: list[str], timeout: float) -> SharedMemory:
        fitting = [name for name, s in self._free.items() if s.size >= nbytes]
        if fitting:
            return self._free.pop(min(fitting, key=lambda name: self._free[name].size))
        while len(self._held) >= MAX_SEGMENTS_IN_FLIGHT:
            self._collect_returned(timeout)
        if self._free:  # too small: replace the biggest free one by one twice its size
            name = max(self._free, key=lambda n: self._free[n].size)
            old = self._free.pop(name)
            nbytes = max(nbytes, 2 * old.size)
            close_and_unlink(old)
            retired.append(name)
        if not has_room(nbytes):
            raise MemoryError(f"/dev/shm has no room for {nbytes} more bytes")
        name = f"{self.name}-{uuid.uuid4().hex[:8]}"
        return SharedMemory(name=name, create=True, size=nbytes)

    def _collect_returned(self, timeout: float) -> None:
        """Move the segments the receiver handed back to the free pool (waiting up to
        ``timeout`` for at least one when ``timeout`` > 0)."""
        if timeout > 0 and not select.select([self._done], [], [], timeout)[0]:
            raise ChannelStalled(f"the receiver held {len(self._held)} segments")
        for name in _read_lines(self._done, self._returned):
            segment = self._held.pop(name, None)
            if segment is not None:
                self._free[name] = segment

    def close(self) -> None:
        with self._lock:
            for segment in [self._probe, *self._free.values(), *self._held.values()]:
                close_and_unlink(segment)
            self._free.clear()
            self._held.clear()
            for fd in (self._ready, self._done):
                with contextlib.suppress(OSError):
                    os.close(fd)


class SharedMessage:
    """A received tensor still in the sender's segment. Take it exactly once: copy it out
    (:meth:`copy`) or reduce it into a buffer of your own (:meth:`add_into`,
    :meth:`copy_into`); each hands the segment back to the sender."""

    def __init__(self, view: np.ndarray, give_back: Callable[[], None]) -> None:
        self.view: np.ndarray | None = view
        self.nbytes = int(view.nbytes)
        self._give_back = give_back

    def copy(self) -> np.ndarray:
        return self._consume(lambda view: view.copy())

    def take(self, convert: Callable[[np.ndarray], Any]) -> Any:
        """``convert(view)``, which must copy (e.g. to a device), then the segment goes back."""
        return self._consume(convert)

    def add_into(self, out: np.ndarray, addend: np.ndarray) -> None:
        """``out = addend + tensor`` (``out`` may be ``addend``)."""
        self._consume(lambda view: np.add(addend, view, out=out))

    def copy_into(self, out: np.ndarray) -> None:
        self._consume(lambda view: np.copyto(out, view))

    def _consume(self, use: Callable[[np.ndarray], Any]) -> Any:
        view, self.view = self.view, None
        if view is None:
            raise RuntimeError("a shared message was taken twice")
        try:
            return use(view)
        finally:
            del view
            self._give_back()


class ChannelReceiver:
    """The receiving end, in the receiver's process. :meth:`on_readable` runs on the worker's
    event loop whenever the sender wrote headers; ``deliver(key, message)`` stores each."""

    def __init__(
        self, run_id: str, source: int, target: int, deliver: Callable[[str, Any], None]
    ) -> None:
        self.name = channel_name(run_id, source, target)
        self.ready = _open_fifo(os.path.join(SHM_DIRECTORY, f"{self.name}-ready"))
        self._done = _open_fifo(os.path.join(SHM_DIRECTORY, f"{self.name}-done"))
        self._pending = bytearray()
        self._attached: dict[str, SharedMemory] = {}
        self._deliver = deliver
        self._lock = threading.Lock()

    def on_readable(self) -> None:
        for line in _read_lines(self.ready, self._pending):
            header = json.loads(line)
            with self._lock:
                for name in header["retired"]:
                    segment = self._attached.pop(name, None)
                    if segment is not None:
                        _close_quietly(segment)
                segment = self._attached.get(header["segment"])
                if segment is None:
                    segment = self._attached[header["segment"]] = _attach(header["segment"])
            view = np.ndarray(
                tuple(header["shape"]), dtype=np.dtype(header["dtype"]), buffer=segment.buf
            )
            name = header["segment"]
            self._deliver(header["key"], SharedMessage(view, lambda name=name: self._return(name)))

    def _return(self, name: str) -> None:
        # Called by the task that took the message; a sender that is gone no longer cares.
        with contextlib.suppress(OSError):
            _write_all(self._done, (name + "\n").encode(), timeout=1.0)

    def close(self) -> None:
        with self._lock:
            for segment in self._attached.values():
                _close_quietly(segment)
            self._attached.clear()
            for fd in (self.ready, self._done):
                with contextlib.suppress(OSError):
                    os.close(fd)


def _attach(name: str) -> SharedMemory:
    # Python < 3.13 also registers an attached segment with the resource tracker. The workers
    # of a local cluster share their parent's tracker, so that is the sender's own entry
    # again, removed when the sender unlinks (or swept when it dies).
    return SharedMemory(name=name, create=False)


def _close_quietly(segment: SharedMemory) -> None:
    # A message still in a discarded mailbox may hold a view; its mapping then goes with it.
    with contextlib.suppress(BufferError):
        segment.close()


def probe_path(run_id: str, source: int, target: int) -> str:
    """The file a peer checks for to tell whether it sees the sender's /dev/shm (if not, it is
    on another host or in another IPC namespace, and the channel cannot be used)."""
    return os.path.join(SHM_DIRECTORY, f"{channel_name(run_id, source, target)}-probe")


class ChannelRegistry:
    """A worker's channels, by (run, source rank, target rank): senders made on first use,
    receivers listening on the worker's event loop until their run is discarded."""

    def __init__(self, asyncio_loop: Any) -> None:
        self._loop = asyncio_loop
        self._senders: dict[tuple[str, int, int], ChannelSender] = {}
        self._receivers: dict[tuple[str, int, int], ChannelReceiver] = {}
        self._guard = threading.Lock()

    def sender(self, run_id: str, source: int, target: int) -> ChannelSender:
        with self._guard:
            key = (run_id, source, target)
            if key not in self._senders:
                self._senders[key] = ChannelSender(run_id, source, target)
            return self._senders[key]

    def listen(
        self, run_id: str, source: int, target: int, deliver: Callable[[str, Any], None]
    ) -> None:
        """Start delivering what ``source`` sends to ``target`` (idempotent). What arrives
        before the event loop registers the reader waits in the FIFO."""
        with self._guard:
            key = (run_id, source, target)
            if key in self._receivers:
                return
            receiver = self._receivers[key] = ChannelReceiver(run_id, source, target, deliver)
        self._loop.call_soon_threadsafe(self._loop.add_reader, receiver.ready, receiver.on_readable)

    def discard(self, run_id: str | None = None) -> None:
        """Close the channels of run ``run_id`` (of every run if None)."""
        with self._guard:
            senders = [k for k in self._senders if run_id is None or k[0] == run_id]
            receivers = [k for k in self._receivers if run_id is None or k[0] == run_id]
            closing_senders = [self._senders.pop(k) for k in senders]
            closing_receivers = [self._receivers.pop(k) for k in receivers]
        for sender in closing_senders:
            sender.close()
        for receiver in closing_receivers:
            self._on_loop(lambda receiver=receiver: self._stop(receiver))

    def _stop(self, receiver: ChannelReceiver) -> None:
        with contextlib.suppress(Exception):
            self._loop.remove_reader(receiver.ready)
        receiver.close()

    def _on_loop(self, action: Callable[[], None]) -> None:
        """Run ``action`` on the event loop (readers may only be removed there) and wait for
        it; directly when already on the loop or when the loop no longer runs."""
        import asyncio

        try:
            on_loop = asyncio.get_running_loop() is self._loop
        except RuntimeError:
            on_loop = False
        if on_loop or self._loop.is_closed() or not self._loop.is_running():
            action()
            return
        finished = threading.Event()

        def run() -> None:
            try:
                action()
            finally:
                finished.set()

        self._loop.call_soon_threadsafe(run)
        if not finished.wait(10.0):
            raise TimeoutError("the worker's event loop did not close a channel within 10 s")
