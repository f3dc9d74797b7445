"""Whether a Dask scheduler answers at an address, asked in a bounded time before a client
is made (docs/security.md, "Joining a cluster").

A Dask server speaks first: on accepting a connection it writes its handshake (one small
message: compression, Python version, pickle protocol) before reading anything. Reading that
message ourselves, with a deadline and a size bound, tells a scheduler from a silent port (a
client would wait on it for ever) and from another kind of server (whose first bytes a client
would take for a frame length, and try to allocate).
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
from typing import Any

# A handshake is a few hundred bytes; anything that claims more is not one.
MAX_HANDSHAKE_BYTES = 64 * 2**10
HANDSHAKE_KEYS = ("compression", "python", "pickle-protocol")


class SchedulerProbeError(RuntimeError):
    """No Dask scheduler answered as one at the address."""


def probe_scheduler(address: str, context: ssl.SSLContext | None, timeout: float) -> dict:
    """The handshake of the Dask server at ``address`` (``tcp://`` or ``tls://``; other
    transports are left to the client), read within ``timeout`` seconds; raises
    :class:`SchedulerProbeError` saying what answered instead."""
    from distributed.comm.addressing import get_address_host_port, parse_address

    try:
        scheme, _ = parse_address(address)
        if scheme not in ("tcp", "tls"):
            return {}
        host, port = get_address_host_port(address)
    except ValueError as error:
        raise SchedulerProbeError(f"{address} is not a scheduler address: {error}") from None
    deadline = time.monotonic() + timeout
    try:
        with socket.create_connection((host, port), timeout=timeout) as raw:
            if scheme == "tls":
                if context is None:
                    context = ssl.create_default_context()
                with context.wrap_socket(raw, server_hostname=host) as secure:
                    return _read_handshake(secure, address, deadline)
            return _read_handshake(raw, address, deadline)
    except TimeoutError:
        raise SchedulerProbeError(
            f"nothing at {address} answered as a Dask scheduler within {timeout:g} s "
            "(a silent port, or a server of another kind)"
        ) from None
    except ssl.SSLError as error:
        raise SchedulerProbeError(f"TLS with {address} failed: {error.reason or error}") from None
    except OSError as error:
        raise SchedulerProbeError(f"cannot reach a scheduler at {address}: {error}") from None


def _read_handshake(sock: socket.socket, address: str, deadline: float) -> dict:
    (length,) = struct.unpack("<Q", _read_exactly(sock, 8, deadline))
    if length > MAX_HANDSHAKE_BYTES:
        raise SchedulerProbeError(_not_dask(address, "its first bytes are not a Dask message"))
    message = _decode(_read_exactly(sock, length, deadline))
    if not isinstance(message, dict) or not all(key in message for key in HANDSHAKE_KEYS):
        raise SchedulerProbeError(_not_dask(address, "its first message is not a handshake"))
    return message


def _read_exactly(sock: socket.socket, count: int, deadline: float) -> bytes:
    chunks, left = [], count
    while left:
        sock.settimeout(max(deadline - time.monotonic(), 0.001))
        chunk = sock.recv(min(left, 65536))
        if not chunk:
            raise SchedulerProbeError("the server closed the connection before a handshake")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _decode(payload: bytes) -> Any:
    """The message in ``payload`` (distributed's frames, msgpack-encoded), or None."""
    from distributed.protocol.core import loads
    from distributed.protocol.utils import unpack_frames

    try:
        return loads(unpack_frames(payload), deserialize=False)
    except Exception:  # any decoding failure means "not a Dask message"
        return None


def _not_dask(address: str, why: str) -> str:
    return f"the server at {address} is not a Dask scheduler ({why})"
