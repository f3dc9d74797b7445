"""The store's JSON files: written strictly (non-finite floats as ``null``, which every
parser accepts; ``workbench.safe_io``), replaced whole so a reader never sees half a file,
and read leniently (files written before the store was strict may hold ``NaN``)."""

from __future__ import annotations

import contextlib
import json
import math
import os
import stat
import threading
from pathlib import Path
from typing import Any

from workbench.safe_io import strict_dumps


def write_json_atomically(path: Path, value: Any) -> None:
    """``value`` as strict JSON in ``path``, written to a temporary name and renamed; on an
    error (a full disk) the temporary file is removed, so it holds no space, and the error
    raised."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    text = strict_dumps(value, indent=2)
    try:
        with open(temporary, "w", encoding="utf-8") as file:
            file.write(text)
        os.replace(temporary, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def overwrite_json(path: Path, value: Any) -> None:
    """``value`` as compact strict JSON over ``path`` in place: the last resort when the disk
    is full (truncating first frees the old file's space, which a rename cannot), at the cost
    of a moment in which a reader sees the file incomplete."""
    with open(path, "w", encoding="utf-8") as file:
        file.write(strict_dumps(value))


# Far above any config, status or summary the store writes: a bigger file is not the store's.
MAX_JSON_BYTES = 16 * 2**20


def read_json(path: Path) -> Any:
    """The JSON value in ``path``; ``NaN`` and ``Infinity`` accepted (older files).

    ``OSError`` when it cannot be opened (a symbolic link is not followed); ``ValueError``
    when it is not a regular file of at most :data:`MAX_JSON_BYTES`, or not JSON. Opened
    without blocking, so a FIFO in its place cannot hang the reader."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(descriptor, "rb") as file:
        status = os.fstat(descriptor)
        if not stat.S_ISREG(status.st_mode):
            raise ValueError(f"{path.name} is not a regular file")
        if status.st_size > MAX_JSON_BYTES:
            raise ValueError(f"{path.name} is larger than {MAX_JSON_BYTES} bytes")
        data = file.read(MAX_JSON_BYTES + 1)
    try:
        return json.loads(data)
    except RecursionError:  # nested deeper than the parser goes: not a file the store wrote
        raise ValueError(f"{path.name} is nested too deeply") from None


def _has_non_finite(value: Any) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, dict):
        return any(_has_non_finite(item) for item in value.values())
    if isinstance(value, list | tuple):
        return any(_has_non_finite(item) for item in value)
    return False


def non_finite_fields(record: dict) -> list[str]:
    """The keys of ``record`` whose value holds a NaN or an infinity, sorted.

    Examples
    --------
    >>> non_finite_fields({"loss": float("nan"), "step": 3, "times": [1.0, float("inf")]})
    ['loss', 'times']
    """
    return sorted(str(key) for key, value in record.items() if _has_non_finite(value))
