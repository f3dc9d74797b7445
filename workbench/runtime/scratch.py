"""The Dask scratch directory of a cluster the workbench starts (docs/security/dashboard.md).

Dask's default, ``<tmp>/dask-scratch-space`` (or ``-<uid>`` when that one is not writable), is a
fixed name in a shared directory: another local user can make it first and read or plant what
the scheduler and workers keep there (each puts its work directory on ``sys.path``). A local
cluster the workbench starts gets instead a directory of its own, made exclusively with a
random name and mode 0700 (``tempfile.mkdtemp``) under Dask's ``temporary-directory`` (the
system's temporary directory by default), and removed when the cluster closes.

A client killed with ``kill -9`` cannot remove it. Each directory therefore holds a lock file
its owner keeps a shared ``flock`` on while it lives; :func:`sweep_stale_scratch_directories`
removes this user's directories whose lock it can take exclusively, i.e. whose owner is gone.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
import tempfile
import time
import weakref

from workbench.safe_io import open_exclusive, open_owned, verify_owned

PREFIX = "dtrain-scratch-"
LOCK_NAME = "owner.lock"
# A directory without its lock file is one whose owner died between making it and locking it,
# or one being made right now: only the first is older than this.
UNLOCKED_GRACE_S = 60.0


def scratch_base() -> str:
    """Where scratch directories are made: Dask's ``temporary-directory``, else the system's
    temporary directory."""
    import dask

    return dask.config.get("temporary-directory", default=None) or tempfile.gettempdir()


class ScratchDirectory:
    """One cluster's private scratch directory; :meth:`close` removes it (so does the end of
    this interpreter, if it was left open)."""

    def __init__(self, path: str, lock: int) -> None:
        self.path = path
        self._remove = weakref.finalize(self, _remove_locked, path, lock, os.getpid())

    def __repr__(self) -> str:
        return f"ScratchDirectory({self.path!r})"

    def close(self) -> None:
        """Remove the directory and everything in it, then let go of its lock (idempotent)."""
        self._remove()


def _remove_locked(path: str, lock: int, owner: int) -> None:
    if os.getpid() != owner:  # a forked child exiting: the directory is its parent's
        return
    shutil.rmtree(path, ignore_errors=True)
    os.close(lock)


def make_scratch_directory() -> ScratchDirectory:
    """A new private scratch directory, locked by this process until it is closed."""
    path = tempfile.mkdtemp(prefix=PREFIX, dir=scratch_base())
    try:
        lock = open_exclusive(os.path.join(path, LOCK_NAME), os.O_RDONLY)
        fcntl.flock(lock, fcntl.LOCK_SH)
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise
    return ScratchDirectory(path, lock)


def sweep_stale_scratch_directories() -> list[str]:
    """Remove this user's scratch directories whose owning process is gone; return their
    paths. Directories of live clusters, and anything another user owns, are left alone."""
    base = scratch_base()
    try:
        names = sorted(name for name in os.listdir(base) if name.startswith(PREFIX))
    except OSError:
        return []
    return [path for path in (os.path.join(base, name) for name in names) if _remove_if_stale(path)]


def _remove_if_stale(path: str) -> bool:
    """Remove ``path`` if it is this user's scratch directory and no process holds its lock
    (removed while holding the lock exclusively, so its owner cannot be coming back)."""
    try:
        status = verify_owned(path, stat.S_IFDIR)
    except OSError:  # gone, or not this user's private directory
        return False
    try:
        lock = open_owned(os.path.join(path, LOCK_NAME), os.O_RDONLY)
    except FileNotFoundError:
        if time.time() - status.st_mtime <= UNLOCKED_GRACE_S:
            return False
        shutil.rmtree(path, ignore_errors=True)
        return True
    except OSError:
        return False
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(lock)
        return False  # its owner holds the lock: the cluster is alive
    try:
        shutil.rmtree(path, ignore_errors=True)
    finally:
        os.close(lock)
    return True
