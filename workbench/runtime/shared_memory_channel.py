"""A one-way shared-memory channel between two workers on one host (NCCL's and gloo's SHM
transport, for Dask workers).

Over loopback TCP every byte is copied by the kernel on both sides, and a Dask RPC costs about
a millisecond through two event loops. Here the sender copies the tensor once into a segment
from its pool for this peer and writes a one-line header (key, segment, dtype, shape) into a
FIFO; the receiver's event loop reads the header and puts a :class:`SharedMessage` (a view
of the segment) into the mailbox, or, where one thread receives everything (a pipeline
stage, a parameter-server worker or shard: ``listen(on_loop=False)``), that thread reads the
FIFO itself while it waits, one wake-up instead of two. The task that takes it either copies
it out, reads it in place until it is done with it (:meth:`SharedMessage.lend`) or, in a
collective, adds it straight into its own buffer (one pass over the bytes instead of two),
and then hands the segment back through a second FIFO.

A sender never waits for the receiver: when every segment of its pool is still held, it makes
another one. So a program that sends several tensors before receiving any (a pipeline stage,
a partitioned graph) cannot deadlock on the channel, and a ring step's send overlaps its
receive. Only past ``MAX_SEGMENTS_IN_FLIGHT`` held segments (a receiver that stopped taking)
does the sender wait, and then no longer than the stall timeout.

The FIFOs, the probe and the segments are files in the run's private directory
(:func:`workbench.runtime.shared_memory.hold_run_directory`; docs/security/shared-memory.md):
each made exclusively with mode 0600, and checked (type, owner, mode) when the other end opens
it. A segment is such a file mapped into both processes; removing the run's directory removes
everything a worker that died left.
"""

from __future__ import annotations

import contextlib
import functools
import math
import mmap
import os
import select
import stat
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import numpy as np

from workbench.runtime.shared_memory import (
    has_room,
    hold_run_directory,
    release_run_directory,
    run_directory,
)
from workbench.safe_io import make_private_fifo, open_exclusive, open_owned, verify_owned

MAX_SEGMENTS_IN_FLIGHT = 64
READ_BYTES = 65536  # the most one read of a FIFO takes (a pipe's default capacity)
# A header is one line of tab-separated fields: key, segment, dtype, shape, retired segments
# (the last two comma-separated). Keys are the programs' own names, never with a tab or a
# line break (refused at the send).
FIELD, ITEM = "\t", ","


class ChannelStalled(TimeoutError):
    """The receiver held every segment past the stall timeout."""


def channel_name(source: int, target: int) -> str:
    """The prefix of a channel's files in its run's directory."""
    return f"{source}-{target}"


def _open_fifos(run_id: str, name: str) -> tuple[str, int, int]:
    """Hold the run's directory and open channel ``name``'s FIFOs in it: (the directory,
    ready, done). Each is opened (made if needed) for reading and writing without blocking:
    Linux allows O_RDWR on a FIFO, so neither side waits for the other to open it and a
    reader never sees end-of-file when a writer goes away."""
    directory = hold_run_directory(run_id)
    opened: list[int] = []
    try:
        for end in ("ready", "done"):
            opened.append(make_private_fifo(os.path.join(directory, f"{name}-{end}")))
    except BaseException:
        for descriptor in opened:
            os.close(descriptor)
        release_run_directory(run_id)
        raise
    return directory, opened[0], opened[1]


class Segment:
    """A file of the run's directory mapped into this process (the sender maps it to write,
    the receiver to read)."""

    __slots__ = ("memory", "name", "path", "size")

    def __init__(self, path: str, size: int, memory: mmap.mmap) -> None:
        self.path, self.name, self.size, self.memory = path, os.path.basename(path), size, memory

    @classmethod
    def create(cls, path: str, size: int) -> Segment:
        descriptor = open_exclusive(path)
        try:
            os.ftruncate(descriptor, size)
            return cls(path, size, mmap.mmap(descriptor, size))
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
            raise
        finally:
            os.close(descriptor)

    @classmethod
    def attach(cls, path: str) -> Segment:
        descriptor = open_owned(path, os.O_RDONLY)
        try:
            size = os.fstat(descriptor).st_size
            return cls(path, size, mmap.mmap(descriptor, size, access=mmap.ACCESS_READ))
        finally:
            os.close(descriptor)

    def close(self) -> None:
        """Unmap (raises BufferError while an array still points into it)."""
        self.memory.close()

    def close_and_unlink(self) -> None:
        self.close()
        # Gone already when the run's directory was removed under a sender still closing.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


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
            chunk = os.read(fd, READ_BYTES)
        except BlockingIOError:
            break
        pending += chunk
        if len(chunk) < READ_BYTES:  # the FIFO is empty now: no second call to find out
            break
    *lines, rest = pending.split(b"\n")
    pending[:] = rest
    return [line.decode() for line in lines]


class ChannelSender:
    """The sending end, in the sender's process: a pool of reusable segments."""

    def __init__(self, run_id: str, source: int, target: int) -> None:
        self.run_id, self.name = run_id, channel_name(source, target)
        self.directory, self._ready, self._done = _open_fifos(run_id, self.name)
        self._returned = bytearray()
        self._free: dict[str, Segment] = {}
        self._held: dict[str, Segment] = {}
        self._lock = threading.Lock()
        self._closed = False
        # Only this process makes it: a peer that sees it shares this host's /dev/shm.
        try:
            self._probe: Segment | None = Segment.create(probe_path(run_id, source, target), 1)
        except BaseException:
            self._probe = None
            self.close()
            raise

    def send(self, key: str, array: np.ndarray, timeout: float) -> None:
        """Copy ``array`` into a free segment and tell the receiver; returns without waiting
        for it (the caller may reuse ``array`` at once)."""

        def fill(view: np.ndarray) -> None:
            np.copyto(view, array, casting="no")

        self._send(key, array.shape, array.dtype, fill, timeout)

    def send_packed(self, key: str, parts: list[np.ndarray], timeout: float) -> None:
        """Like :meth:`send` of their concatenation (each flattened, one dtype), written
        straight into the segment: no packed copy is made first."""
        dtype = parts[0].dtype
        if any(part.dtype != dtype for part in parts):
            raise TypeError(f"packed parts must share one dtype, got {[p.dtype for p in parts]}")
        size = sum(int(part.size) for part in parts)

        def fill(view: np.ndarray) -> None:
            np.concatenate([part.reshape(-1) for part in parts], out=view)

        self._send(key, (size,), dtype, fill, timeout)

    def _send(
        self,
        key: str,
        shape: tuple[int, ...],
        dtype: np.dtype,
        fill: Callable[[np.ndarray], None],
        timeout: float,
    ) -> None:
        if FIELD in key or "\n" in key:
            raise ValueError(f"a channel key may hold no tab or line break: {key!r}")
        nbytes = math.prod(shape) * dtype.itemsize
        with self._lock:
            self._collect_returned(0.0)
            retired: list[str] = []
            segment = self._segment_for(max(nbytes, 1), retired, timeout)
            view = np.ndarray(shape, dtype=dtype, buffer=segment.memory)
            fill(view)
            del view  # no exported buffer may outlive the segment
            self._held[segment.name] = segment
            # The retired segments are those the receiver may close (grown past).
            fields = (key, segment.name, dtype.str, _joined(shape), ITEM.join(retired))
            _write_all(self._ready, (FIELD.join(fields) + "\n").encode(), timeout)

    def _segment_for(self, nbytes: int, retired: list[str], timeout: float) -> Segment:
        fitting = [name for name, s in self._free.items() if s.size >= nbytes]
        if fitting:
            return self._free.pop(min(fitting, key=lambda name: self._free[name].size))
        while len(self._held) >= MAX_SEGMENTS_IN_FLIGHT:
            self._collect_returned(timeout)
        if self._free:  # too small: replace the biggest free one by one twice its size
            name = max(self._free, key=lambda n: self._free[n].size)
            old = self._free.pop(name)
            nbytes = max(nbytes, 2 * old.size)
            old.close_and_unlink()
            retired.append(name)
        if not has_room(nbytes):
            raise MemoryError(f"/dev/shm has no room for {nbytes} more bytes")
        name = f"{self.name}-{uuid.uuid4().hex[:8]}"
        return Segment.create(os.path.join(self.directory, name), nbytes)

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
            if self._closed:
                return
            self._closed = True
            probe = [self._probe] if self._probe is not None else []
            for segment in [*probe, *self._free.values(), *self._held.values()]:
                segment.close_and_unlink()
            self._free.clear()
            self._held.clear()
            for fd in (self._ready, self._done):
                with contextlib.suppress(OSError):
                    os.close(fd)
            release_run_directory(self.run_id)


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

    def lend(self) -> tuple[np.ndarray, Callable[[], None]]:
        """The tensor in place (read-only) and the call that hands its segment back, for a
        reader done with it later (a shard applying a push, a worker computing on its
        pull); the view must not be used after that call, which may come once."""
        view, self.view = self.view, None
        if view is None:
            raise RuntimeError("a shared message was taken twice")
        settled = threading.Event()

        def settle() -> None:
            if not settled.is_set():
                settled.set()
                self._give_back()

        return view, settle

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
        self.run_id, self.name = run_id, channel_name(source, target)
        self.directory, self.ready, self._done = _open_fifos(run_id, self.name)
        self._closed = False
        self._pending = bytearray()
        self._attached: dict[str, Segment] = {}
        self._deliver = deliver
        self._lock = threading.Lock()
        self._reading = threading.RLock()  # one reader at a time: the loop's, or a pumper's
        self.on_loop = True  # read by the worker's event loop (else by whoever waits on it)

    def on_readable(self) -> None:
        """Deliver every message the sender has announced so far (the event loop calls it
        when the FIFO is readable; a thread that waits on this channel itself may call it
        any time)."""
        with self._reading:
            if not self._closed:
                self._deliver_announced()

    def _deliver_announced(self) -> None:
        for line in _read_lines(self.ready, self._pending):
            key, name, dtype, shape, retired = line.split(FIELD)
            with self._lock:
                for old in _split(retired):
                    segment = self._attached.pop(old, None)
                    if segment is not None:
                        _close_quietly(segment)
                segment = self._attached.get(name)
                if segment is None:
                    segment = self._attached[name] = self._attach(name)
            view = np.ndarray(
                tuple(int(size) for size in _split(shape)),
                dtype=np.dtype(dtype),
                buffer=segment.memory,
            )
            self._deliver(key, SharedMessage(view, functools.partial(self._return, name)))

    def _attach(self, name: str) -> Segment:
        if os.path.basename(name) != name:  # only the sender writes headers, but still
            raise ValueError(f"a channel header names a segment outside its run: {name!r}")
        return Segment.attach(os.path.join(self.directory, name))

    def _return(self, name: str) -> None:
        # Called by the task that took the message; a sender that is gone no longer cares.
        with contextlib.suppress(OSError):
            _write_all(self._done, (name + "\n").encode(), timeout=1.0)

    def close(self) -> None:
        with self._reading, self._lock:
            if self._closed:
                return
            self._closed = True
            for segment in self._attached.values():
                _close_quietly(segment)
            self._attached.clear()
            for fd in (self.ready, self._done):
                with contextlib.suppress(OSError):
                    os.close(fd)
            release_run_directory(self.run_id)


def _joined(shape: tuple[int, ...]) -> str:
    return ITEM.join(str(size) for size in shape)


def _split(field: str) -> list[str]:
    """A header's comma-separated field as its items (none for an empty field)."""
    return field.split(ITEM) if field else []


def _close_quietly(segment: Segment) -> None:
    # A message still in a discarded mailbox may hold a view; its mapping then goes with it.
    with contextlib.suppress(BufferError):
        segment.close()


def probe_path(run_id: str, source: int, target: int) -> str:
    """The file a peer checks for to tell whether it sees the sender's /dev/shm (if not, it is
    on another host or in another IPC namespace, and the channel cannot be used)."""
    return os.path.join(run_directory(run_id), f"{channel_name(source, target)}-probe")


def sees_probe(path: str) -> bool:
    """On the peer: whether the sender's probe at ``path`` is here, as this user's private
    file (something else there raises :class:`~workbench.safe_io.ForeignPathError`)."""
    try:
        verify_owned(os.path.dirname(path), stat.S_IFDIR)
        verify_owned(path)
    except FileNotFoundError:
        return False
    return True


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
        self,
        run_id: str,
        source: int,
        target: int,
        deliver: Callable[[str, Any], None],
        on_loop: bool = True,
    ) -> ChannelReceiver:
        """Start delivering what ``source`` sends to ``target`` (idempotent: the first call
        decides). What arrives before the event loop registers the reader waits in the FIFO.
        ``on_loop=False``: the event loop leaves the FIFO alone, and the one thread that waits
        for these messages reads it itself (:meth:`ChannelReceiver.on_readable`), which saves
        the hop through the event loop on every message."""
        with self._guard:
            key = (run_id, source, target)
            if key in self._receivers:
                return self._receivers[key]
            receiver = self._receivers[key] = ChannelReceiver(run_id, source, target, deliver)
            receiver.on_loop = on_loop
        if on_loop:
            self._loop.call_soon_threadsafe(
                self._loop.add_reader, receiver.ready, receiver.on_readable
            )
        return receiver

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
            self._on_loop(functools.partial(self._stop, receiver))

    def _stop(self, receiver: ChannelReceiver) -> None:
        if receiver.on_loop:
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
