"""What every shared-memory object of the workbench has in common: names derived from the
run (so a finished run's objects can be found and swept on the host, even those of a worker
that died), a check that /dev/shm has room, and unlinking.

The objects themselves are the channels of ``workbench/runtime/shared_memory_channel.py``.
"""

from __future__ import annotations

import contextlib
import os
from multiprocessing import resource_tracker
from multiprocessing.shared_memory import SharedMemory

SHM_DIRECTORY = "/dev/shm"


def segment_prefix(run_id: str) -> str:
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


def close_and_unlink(segment: SharedMemory) -> None:
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
    prefix = segment_prefix(run_id) + "-"
    try:
        names = [name for name in os.listdir(SHM_DIRECTORY) if name.startswith(prefix)]
    except OSError:
        return []
    for name in names:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(SHM_DIRECTORY, name))
    return names
