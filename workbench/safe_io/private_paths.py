"""Create and open files and directories so that another local user can neither read them
nor plant something in their place.

Every object is created exclusively (``O_EXCL``, ``mkdir``, ``mkfifo``: something already at
the name is an error, never reused), with owner-only permissions, and without following
symbolic links. Where two processes of the same user share an object (two workers opening
one FIFO), the second verifies what it found before using it: its type, that this user owns
it, and that no one else may read or write it. What fails a check raises
:class:`ForeignPathError` naming the path, what sits there and its owner.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import stat
from pathlib import Path

_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFREG: "a regular file",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFLNK: "a symbolic link",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


def owner_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def describe(status: os.stat_result) -> str:
    """What sits at a path, in words: its kind, owner and mode."""
    kind = _KINDS.get(stat.S_IFMT(status.st_mode), "a special file")
    return (
        f"{kind} owned by {owner_name(status.st_uid)} with mode {stat.S_IMODE(status.st_mode):04o}"
    )


class ForeignPathError(PermissionError):
    """Something at a path this user was about to create or use is not this user's private
    object (planted by another user, or left with loose permissions)."""

    def __init__(self, path: str | os.PathLike, found: str, expected: str) -> None:
        self.path = os.fspath(path)
        super().__init__(
            f"{self.path} is {found}, not {expected} of {owner_name(os.geteuid())}: "
            "refusing to use it (another local user may have planted it; remove it or "
            "choose another location)"
        )


def _check(path: str | os.PathLike, status: os.stat_result, kind: int, expected: str) -> None:
    if (
        stat.S_IFMT(status.st_mode) != kind
        or status.st_uid != os.geteuid()
        or status.st_mode & 0o077
    ):
        raise ForeignPathError(path, describe(status), expected)


def verify_owned(path: str | os.PathLike, kind: int = stat.S_IFREG) -> os.stat_result:
    """``lstat(path)`` after checking that it is of ``kind`` (an ``S_IF*`` constant), owned by
    this user and closed to group and others; raises :class:`ForeignPathError` otherwise
    (``FileNotFoundError`` when nothing is there)."""
    status = os.lstat(path)
    _check(path, status, kind, f"a private {_KINDS.get(kind, 'file')[2:]}")
    return status


def ensure_private_directory(path: str | os.PathLike, parents: bool = False) -> Path:
    """``path`` as a directory only this user can enter: made with mode 0700 when missing,
    verified when it exists (a directory another user made, or one open to others, is
    refused rather than tightened: its owner may have kept files in it)."""
    target = Path(path)
    if parents:
        target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(target, 0o700)
        os.chmod(target, 0o700)  # mkdir's mode passes through the umask
    except FileExistsError:
        verify_owned(target, stat.S_IFDIR)
    return target


def open_exclusive(path: str | os.PathLike, flags: int = os.O_RDWR) -> int:
    """A new regular file at ``path``, mode 0600, opened with ``flags``; something already
    at the name raises :class:`ForeignPathError` describing it."""
    try:
        return os.open(path, flags | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        try:
            found = describe(os.lstat(path))
        except FileNotFoundError:
            found = "something that vanished when looked at"
        raise ForeignPathError(path, found, "a new private file") from None


def open_owned(path: str | os.PathLike, flags: int, kind: int = stat.S_IFREG) -> int:
    """Open an existing object of this user at ``path`` (no symbolic link followed), then
    check what was opened (so a swap between check and open cannot pass)."""
    descriptor = os.open(path, flags | os.O_NOFOLLOW)
    try:
        _check(path, os.fstat(descriptor), kind, f"a private {_KINDS.get(kind, 'file')[2:]}")
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


def make_private_fifo(path: str | os.PathLike) -> int:
    """Open the FIFO at ``path`` for reading and writing without blocking, making it (mode
    0600) when missing; one already there must be this user's private FIFO (the peer
    process of the same run made it first)."""
    with contextlib.suppress(FileExistsError):
        os.mkfifo(path, 0o600)
    return open_owned(path, os.O_RDWR | os.O_NONBLOCK, stat.S_IFIFO)
