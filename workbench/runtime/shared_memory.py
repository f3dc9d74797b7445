"""Send/Recv between workers on one host through shared memory (the SHM transport of NCCL and
gloo's shared-memory pairs, for Dask workers).

Over loopback TCP every byte is copied by the kernel on both sides and costs CPU on both cores,
so a ring step that sends and receives at once runs at half the one-way speed on a 2-core
machine. Through shared memory the sender copies the tensor once into a segment it keeps per
(run, peer), and a small RPC names the segment; the receiver copies it out on its own core and
answers. The sender may reuse the segment as soon as the answer arrives, so one segment per
peer suffices for synchronous sends.

Segments are named after the run, so discarding a run unlinks (sender) and closes (receiver)
everything it made. A peer on another host cannot attach the segment and says so: the sender
then falls back to the TCP path for that peer.
"""

from __future__ import annotations

import contextlib
import os
import threading
import uuid
from multiprocessing import resource_tracker
from multiprocessing.shared_memory import SharedMemory
from typing import Any

import numpy as np

SHM_DIRECTORY = "/dev/shm"
UNREACHABLE = "unreachable"  # the receiver's answer when it cannot attach the segment


def _segment_prefix(run_id: str) -> str:
    # POSIX shared-memory names are short and flat: keep letters, digits, dashes.
    safe = "".join(c if c.isalnum() or c == "-" else "-" for c in run_id)
    return f"dtrain-{safe[-40:]}"


def has_room(nbytes: int) -> bool:
    """Whether /dev/shm can hold ``nbytes`` twice over (a full tmpfs would SIGBUS the writer)."""
    try:
        stats = os.statvfs(SHM_DIRECTORY)
    except OSError:
        return False
    return stats.f_bavail * stats.f_frsize > 2 * nbytes


class OutgoingSegments:
    """The sending side: one growable segment per (run, peer), reused send after send."""

    def __init__(self) -> None:
        self._segments: dict[tuple[str, int, int], SharedMemory] = {}
        self._locks: dict[tuple[str, int, int], threading.Lock] = {}
        self._guard = threading.Lock()

    def lock(self, run_id: str, rank: int, peer: int) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault((run_id, rank, peer), threading.Lock())

    def write(self, run_id: str, rank: int, peer: int, array: Any) -> str:
        """Copy ``array`` into the (run, rank -> peer) segment, growing it if needed; returns
        the segment's name. Call with :meth:`lock` held until the peer has answered."""
        key = (run_id, rank, peer)
        segment = self._segments.get(key)
        nbytes = max(int(array.nbytes), 1)
        if segment is None or segment.size < nbytes:
            if segment is not None:
                _close_and_unlink(segment)
            name = f"{_segment_prefix(run_id)}-{rank}-{peer}-{uuid.uuid4().hex[:8]}"
            # Grow geometrically: gradient buckets of one run differ in size.
            size = max(nbytes, 2 * segment.size if segment is not None else nbytes)
            segment = self._segments[key] = SharedMemory(name=name, create=True, size=size)
        view = np.ndarray(array.shape, dtype=array.dtype, buffer=segment.buf)
        np.copyto(view, array, casting="no")
        del view  # no exported buffer may outlive the segment
        return segment.name

    def discard(self, run_id: str | None = None) -> None:
        """Unlink the segments of run ``run_id`` (of every run if None)."""
        with self._guard:
            for key in [k for k in self._segments if run_id is None or k[0] == run_id]:
                _close_and_unlink(self._segments.pop(key))
            for key in [k for k in self._locks if run_id is None or k[0] == run_id]:
                del self._locks[key]


class IncomingSegments:
    """The receiving side: segments attached by name, kept open while their run lasts."""

    def __init__(self) -> None:
        self._attached: dict[str, SharedMemory] = {}
        self._guard = threading.Lock()

    def read(self, name: str, dtype: str, shape: tuple[int, ...]) -> np.ndarray | None:
        """A private copy of the tensor in segment ``name``; None if it cannot be attached
        (the sender is on another host)."""
        with self._guard:
            segment = self._attached.get(name)
            if segment is None:
                try:
                    segment = SharedMemory(name=name, create=False)
                except (FileNotFoundError, OSError):
                    return None
                # Python < 3.13 also registers an attached segment with the resource
                # tracker; the workers of one nanny share it, so that is the sender's own
                # registration again, removed when the sender unlinks (or dies).
                for stale in [n for n in self._attached if _same_channel(n, name)]:
                    self._attached.pop(stale).close()  # the sender grew it: old one unlinked
                self._attached[name] = segment
        view = np.ndarray(shape, dtype=np.dtype(dtype), buffer=segment.buf)
        array = view.copy()
        del view
        return array

    def discard(self, run_id: str | None = None) -> None:
        """Close the attached segments of run ``run_id`` (of every run if None)."""
        prefix = _segment_prefix(run_id) + "-" if run_id is not None else ""
        with self._guard:
            for name in [n for n in self._attached if n.startswith(prefix)]:
                self._attached.pop(name).close()


def _close_and_unlink(segment: SharedMemory) -> None:
    segment.close()
    try:
        segment.unlink()
    except FileNotFoundError:
        # A peer ending the same run swept it first (unlink_run_segments); the resource
        # tracker still lists it, and would warn at exit.
        resource_tracker.unregister(segment._name, "shared_memory")


def unlink_run_segments(run_id: str) -> list[str]:
    """Remove every segment of run ``run_id`` left on this host, including those of a worker
    that died before it could unlink its own (call once the run is over); returns their
    names."""
    prefix = _segment_prefix(run_id) + "-"
    try:
        names = [name for name in os.listdir(SHM_DIRECTORY) if name.startswith(prefix)]
    except OSError:
        return []
    for name in names:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(SHM_DIRECTORY, name))
    return names


def _same_channel(a: str, b: str) -> bool:
    """Two segment names of the same (run, sender, receiver): all but the random suffix."""
    return a.rsplit("-", 1)[0] == b.rsplit("-", 1)[0]
