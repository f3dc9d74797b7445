"""Where every shared-memory object of a run lives: one private directory per run on
/dev/shm (docs/security/shared-memory.md).

``/dev/shm`` is shared by every local user and lists its names to all of them. So a run never
puts a name of its own there except its directory, ``dtrain-<uid>-<digest>``: made with mode
0700 by whichever process of the run gets there first, its digest a one-way hash of the run id
(seeing one run's directory reveals neither its id nor the directory of any run derived from
it). The FIFOs, probes and segments of the channels
(``workbench/runtime/shared_memory_channel.py``) and the host's copy of the data set
(``workbench/runtime/host_dataset.py``) are files inside it, beyond another user's reach.
Anything at the directory's name that is not this user's private directory raises
:class:`~workbench.safe_io.ForeignPathError` naming it and its owner: the run fails at once,
it never waits on or reads what someone planted.

Every process using a run's directory holds a shared ``flock`` on its lock file from the
moment it joins until it lets go (:func:`release_run_directory`) or dies, ``kill -9``
included. The directory is removed only by a process that takes that lock exclusively, so
never under a live run, and a crashed run's directory is found and removed later
(:func:`sweep_stale_run_directories`) without trusting process ids.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import secrets
import shutil
import stat
import sys
import threading
import time

from workbench.safe_io import ForeignPathError, verify_owned
from workbench.safe_io.private_paths import describe

SHM_DIRECTORY = "/dev/shm"
LOCK_NAME = "lock"
# A process joining a directory while another removes it retries; this bounds the retries
# (each is a few system calls: only a sweep holding the lock for that long could exhaust it).
JOIN_SECONDS = 2.0
_GONE = ".gone-"  # a directory being removed is first renamed to <name>.gone-<random>

# Each run directory this process holds, by path: [its lock's descriptor, how many holders].
_holds: dict[str, list[int]] = {}
_holds_guard = threading.Lock()


def run_directory(run_id: str) -> str:
    """The path of run ``run_id``'s private directory on this host (it may not exist yet)."""
    digest = hashlib.sha256(run_id.encode()).hexdigest()[:32]
    return os.path.join(SHM_DIRECTORY, f"dtrain-{os.geteuid()}-{digest}")


def _own_prefix() -> str:
    return f"dtrain-{os.geteuid()}-"


def has_room(nbytes: int) -> bool:
    """Whether /dev/shm can hold ``nbytes`` twice over (a full tmpfs would SIGBUS the writer)."""
    try:
        stats = os.statvfs(SHM_DIRECTORY)
    except OSError:
        return False
    return stats.f_bavail * stats.f_frsize > 2 * nbytes


def hold_run_directory(run_id: str) -> str:
    """Run ``run_id``'s private directory, made if missing; returns its path. It is not
    removed before every :func:`hold_run_directory` of every process is matched by a
    :func:`release_run_directory` (or the process died). Raises :class:`ForeignPathError`
    when something else sits at its name."""
    path = run_directory(run_id)
    with _holds_guard:
        held = _holds.get(path)
        if held is None:
            _holds[path] = [_join(path), 1]
        else:
            held[1] += 1
    return path


def release_run_directory(run_id: str) -> None:
    """Match one :func:`hold_run_directory` of run ``run_id`` in this process."""
    path = run_directory(run_id)
    with _holds_guard:
        held = _holds.get(path)
        if held is None:
            return
        held[1] -= 1
        if held[1] > 0:
            return
        del _holds[path]
    os.close(held[0])


def _join(path: str) -> int:
    """The descriptor of ``path``'s lock file, locked shared, once ``path`` is this user's
    private directory and that lock file is still the one at its name."""
    deadline = time.monotonic() + JOIN_SECONDS
    while True:
        try:
            os.mkdir(path, 0o700)
            os.chmod(path, 0o700)  # mkdir's mode passes through the umask
        except FileExistsError:
            pass
        try:
            verify_owned(path, stat.S_IFDIR)
            lock = _open_lock(path)
        except FileNotFoundError:  # removed by a sweep between two steps: make it again
            lock = None
        if lock is not None:
            try:
                fcntl.flock(lock, fcntl.LOCK_SH | fcntl.LOCK_NB)
                if _is_current(path, lock):
                    return lock
            except BlockingIOError:  # a sweep holds it: the directory is on its way out
                pass
            os.close(lock)
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} kept being removed while this process joined it")
        time.sleep(0.002)


def _open_lock(directory: str) -> int:
    """The lock file of ``directory`` (made if missing: inside a private directory only this
    user can have put something there, but it is checked like anything opened)."""
    path = os.path.join(directory, LOCK_NAME)
    lock = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    status = os.fstat(lock)
    if not stat.S_ISREG(status.st_mode) or status.st_uid != os.geteuid() or status.st_mode & 0o077:
        os.close(lock)
        raise ForeignPathError(path, describe(status), "a private regular file")
    return lock


def _is_current(directory: str, lock: int) -> bool:
    """Whether ``lock`` is still the lock file at ``directory``'s name (a sweep renames the
    directory away before emptying it)."""
    try:
        named = os.stat(os.path.join(directory, LOCK_NAME), follow_symlinks=False)
    except FileNotFoundError:
        return False
    opened = os.fstat(lock)
    return (named.st_dev, named.st_ino) == (opened.st_dev, opened.st_ino)


def unlink_run_segments(run_id: str) -> list[str]:
    """Remove run ``run_id``'s directory with what it holds, unless a process (this one
    included) still holds it: call it once the run is over here, and the last process of
    the run to do so removes it, with whatever a worker that died left. Returns the names
    it held."""
    return _remove_if_unused(run_directory(run_id)) or []


def sweep_stale_run_directories() -> list[str]:
    """Remove this user's run directories on /dev/shm that no live process holds (their run
    is over: ended, or killed before it could clean up); returns their paths. Live runs'
    directories are kept, and what another user put there is reported and left alone."""
    try:
        names = sorted(os.listdir(SHM_DIRECTORY))
    except OSError:
        return []
    removed = []
    for name in names:
        if not name.startswith(_own_prefix()):
            continue
        path = os.path.join(SHM_DIRECTORY, name)
        if _GONE in name:  # renamed by a sweep (that may have died half-way)
            if _is_own_directory(path) and _remove_tombstone(path):
                removed.append(path)
        elif (
            re.fullmatch(r"[0-9a-f]{32}", name[len(_own_prefix()) :])
            and _remove_if_unused(path) is not None
        ):
            removed.append(path)
    return removed


def _is_own_directory(path: str) -> bool:
    try:
        verify_owned(path, stat.S_IFDIR)
    except FileNotFoundError:
        return False
    except ForeignPathError as error:
        _report(f"left alone: {error}")
        return False
    return True


def _remove_if_unused(path: str) -> list[str] | None:
    """Remove ``path`` (a run directory) if no process holds its lock; the names it held
    (None: not removed)."""
    if not _is_own_directory(path):
        return None
    try:
        lock = _open_lock(path)
    except FileNotFoundError:  # removed meanwhile
        return None
    except OSError as error:
        _report(f"left alone: {error}")
        return None
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        if not _is_current(path, lock):
            return None  # another sweep took it first
        # Renamed away first, so a process joining now makes a new directory instead of
        # joining one being emptied.
        gone = f"{path}{_GONE}{secrets.token_hex(4)}"
        os.rename(path, gone)
        names = _remove_tree(gone)
    except BlockingIOError:
        return None  # a process of the run still holds it
    except OSError as error:
        _report(f"cannot remove {path}: {error}")
        return None
    finally:
        os.close(lock)
    return [] if names is None else names


def _remove_tombstone(path: str) -> bool:
    """Remove ``path``, a run directory a sweep renamed away, unless a sweep is emptying it
    right now (it holds the lock); whether it was removed."""
    try:
        lock = os.open(os.path.join(path, LOCK_NAME), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        lock = None
    except OSError as error:
        _report(f"left alone: {path}: {error}")
        return False
    try:
        if lock is not None:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return _remove_tree(path) is not None
    except BlockingIOError:
        return False
    finally:
        if lock is not None:
            os.close(lock)


def _remove_tree(path: str) -> list[str] | None:
    """Remove ``path`` and what it holds, never following a link; report what cannot be
    removed. Returns the names it held (None when ``path`` could not be listed)."""
    try:
        names = os.listdir(path)
    except OSError as error:
        _report(f"cannot list {path}: {error}")
        return None
    for name in names:
        target = os.path.join(path, name)
        try:
            if stat.S_ISDIR(os.lstat(target).st_mode):  # none is made there
                shutil.rmtree(target)
            else:
                os.unlink(target)  # a link itself, not what it points to
        except FileNotFoundError:
            pass
        except OSError as error:
            _report(f"cannot remove {target}: {error}")
    try:
        os.rmdir(path)
    except FileNotFoundError:
        pass
    except OSError as error:
        _report(f"cannot remove {path}: {error}")
    return sorted(name for name in names if name != LOCK_NAME)


def _report(line: str) -> None:
    print(f"[shared memory] {line}", file=sys.stderr)
