"""SHA-256 digests of checkpoint files, read in fixed-size chunks.

Files are hashed as streams so that verifying a multi-gigabyte ``params.npz`` costs one chunk of
memory, and the manifest is hashed over a canonical JSON encoding so that its digest depends on
its content only, not on indentation or key order.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from typing import Any, BinaryIO

CHUNK_BYTES = 1 << 20


@dataclass(frozen=True)
class FileDigest:
    """SHA-256 (lower-case hex) and size in bytes of one file."""

    sha256: str
    bytes: int


def sha256_stream(stream: BinaryIO, chunk_bytes: int = CHUNK_BYTES) -> FileDigest:
    """Hash ``stream`` from its current position to its end.

    Parameters
    ----------
    stream : binary file object
        Read until it returns no more bytes; it is left at its end.
    chunk_bytes : int, optional
        How much is read at a time.

    Returns
    -------
    FileDigest
        The digest and the number of bytes read.

    Examples
    --------
    >>> import io
    >>> sha256_stream(io.BytesIO(b"abc")).sha256[:16]
    'ba7816bf8f01cfea'
    """
    digest = hashlib.sha256()
    size = 0
    while chunk := stream.read(chunk_bytes):
        digest.update(chunk)
        size += len(chunk)
    return FileDigest(sha256=digest.hexdigest(), bytes=size)


def sha256_file(path: str | os.PathLike[str], chunk_bytes: int = CHUNK_BYTES) -> FileDigest:
    """Hash the file at ``path``; see :func:`sha256_stream`."""
    with open(path, "rb") as stream:
        return sha256_stream(stream, chunk_bytes)


def canonical_json(value: Any) -> bytes:
    """Encode ``value`` as compact, key-sorted, ASCII-only strict JSON.

    Raises ``ValueError`` for NaN or infinities and ``TypeError`` for values JSON cannot hold.
    """
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return text.encode("ascii")


def sha256_json(value: Any) -> str:
    """SHA-256 (hex) of :func:`canonical_json` of ``value``."""
    return hashlib.sha256(canonical_json(value)).hexdigest()
