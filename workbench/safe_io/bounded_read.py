"""Reading a file a user named without letting it hang the reader or exhaust its memory
(docs/security/files.md).

A name can lead to a FIFO (opening it for reading waits for a writer, forever), a device
(``/dev/zero`` never ends) or a directory; a small file can declare an enormous array. So a
data or checkpoint file is opened without blocking and refused unless it is a regular file,
and every size a file declares is checked against the file's own size and against a memory
budget before anything that large is allocated. What fails a check raises
:class:`FileRefused`, naming the file and what is wrong; the loaders turn it into their own
user error.
"""

from __future__ import annotations

import fcntl
import os
import stat
from typing import BinaryIO

import numpy as np

from workbench.safe_io.private_paths import describe

# The share of the memory available now that one file's contents may take: the run needs
# the rest (the model, its gradients, a copy per local device).
MEMORY_FRACTION = 0.5
_UNITS = ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB")


class FileRefused(ValueError):
    """A file that is not a regular file, is malformed, or declares more than memory allows.

    ``path`` is the file, ``reason`` what is wrong with it; ``str()`` says both."""

    def __init__(self, path: str | os.PathLike, reason: str) -> None:
        self.path = os.fspath(path)
        self.reason = reason
        super().__init__(f"{self.path}: {reason}")


class FileMissing(FileRefused):
    """Nothing is at the path."""


def open_regular(path: str | os.PathLike) -> BinaryIO:
    """``path`` opened for reading in binary, after checking that what was opened is a regular
    file: opened with ``O_NONBLOCK`` so that a FIFO cannot make the open wait for a writer,
    then checked with ``fstat`` on the descriptor (a swap after the check cannot pass).

    Raises
    ------
    FileRefused
        When nothing is there (:class:`FileMissing`), it cannot be opened, or it is not a
        regular file (the reason says what sits there: a FIFO, a directory, a device).

    Examples
    --------
    >>> import tempfile
    >>> try:
    ...     open_regular(tempfile.mkdtemp())
    ... except FileRefused as error:
    ...     print(error.reason.split(" owned by ")[0])
    is a directory
    """
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise FileMissing(path, "does not exist") from None
    except OSError as error:
        raise FileRefused(path, f"cannot be opened ({error.strerror or error})") from None
    try:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            raise FileRefused(path, f"is {describe(status)}, not a regular file")
        # Reads of a regular file never block; the flag only had to guard the open.
        flags = fcntl.fcntl(descriptor, fcntl.F_GETFL)
        fcntl.fcntl(descriptor, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def file_size(handle: BinaryIO) -> int:
    """The size in bytes of the open file ``handle``."""
    return os.fstat(handle.fileno()).st_size


def format_bytes(count: int) -> str:
    """``count`` bytes in the largest binary unit that keeps the number at least 1.

    Examples
    --------
    >>> format_bytes(512), format_bytes(3 << 30), format_bytes(10**21)
    ('512 bytes', '3.0 GiB', '867.4 EiB')
    """
    value, unit = float(count), 0
    while value >= 1024 and unit < len(_UNITS) - 1:
        value, unit = value / 1024, unit + 1
    return f"{count} bytes" if unit == 0 else f"{value:.1f} {_UNITS[unit]}"


def available_memory() -> int:
    """Bytes of memory this machine can give a process now without swapping."""
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except ImportError:  # psutil comes with distributed; this is only a fallback
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def memory_budget() -> int:
    """How many bytes one file's contents may take in memory: ``MEMORY_FRACTION`` of the
    memory available now."""
    return int(available_memory() * MEMORY_FRACTION)


def check_memory(path: str | os.PathLike, needed: int, what: str) -> None:
    """Refuse, naming ``path`` and the estimate, when ``needed`` bytes (``what`` says what
    would take them) exceed :func:`memory_budget`."""
    budget = memory_budget()
    if needed > budget:
        raise FileRefused(
            path,
            f"{what} would take {format_bytes(needed)} of memory, more than the "
            f"{format_bytes(budget)} a file may take here ({MEMORY_FRACTION:.0%} of the "
            "memory available now)",
        )


def read_into(path: str | os.PathLike, stream: BinaryIO, array: np.ndarray, what: str) -> None:
    """Fill the contiguous ``array`` with the next bytes of ``stream``: never more than the
    array holds is read, so a stream longer than promised (a decompression bomb) costs
    nothing beyond it. Refuses, naming ``path``, when the stream ends first."""
    view = memoryview(array.reshape(-1).view(np.uint8))
    filled = 0
    while filled < len(view):
        count = stream.readinto(view[filled:])
        if not count:
            raise FileRefused(
                path, f"is truncated: {what} needs {len(view)} bytes, found only {filled}"
            )
        filled += count
