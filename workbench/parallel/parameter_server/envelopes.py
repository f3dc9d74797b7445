"""The messages between a parameter-server worker and a shard: their keys and small headers.

Pulls, pushes and their answers travel through the workers' Send/Recv transport
(``workbench/runtime/peer_transport.py``): between processes on one host a shared-memory
channel (one copy into a segment and a line in a FIFO), otherwise Dask's comms. A worker asks
and goes on; the shard answers on its own thread as the protocol allows. A message's key
says what it is and carries its small fields; ``token`` is the asking worker object's own, so
an answer meant for a worker that was dropped never reaches the one set up in its place.

=====================================  ====================================================
worker -> shard                        payload
=====================================  ====================================================
``pull/{step}/{wanted}/{token}``        none: grant a read of version ``wanted`` or newer
``push/{step}/{read}/{token}/dense``    the gradients for the shard, packed in one array
``push/{step}/{read}/{token}/pickled``  a pickled push with row-sparse or compressed entries
``push/.../{form}/{then}``              a push that also asks for a read of version
                                        ``then`` or newer, answered under step ``then``
``report/{token}``                      a pickled ``StepReport`` (free-running workers)
=====================================  ====================================================

=========================  ================================================================
shard -> worker            payload
=========================  ================================================================
``grant/{step}/{token}``   int64 ``[version, done]``
``values/{step}/{token}``  the shard's variables for the worker, packed in one array
``ack/{step}/{token}``     int64 ``[staleness or -1, dropped, version after the push]``
=========================  ================================================================
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import Any

import numpy as np

PULL, PUSH, REPORT = "pull", "push", "report"
DENSE, PICKLED = "dense", "pickled"
NO_PAYLOAD = np.zeros(1, np.uint8)  # a message carries an array; a pull needs none


@dataclass(frozen=True)
class Envelope:
    """A worker's message to a shard, read from its key."""

    kind: str  # PULL, PUSH or REPORT
    token: str
    step: int = 0
    version: int = 0  # a pull: the version wanted; a push: the version read
    form: str = DENSE  # a push's payload: DENSE or PICKLED
    # A push's pull, asked with it (one message instead of two): the step it is answered
    # under, which is also the version wanted; None: the worker asks on its own.
    then: int | None = None


def pull_key(step: int, wanted: int, token: str) -> str:
    return f"{PULL}/{step}/{wanted}/{token}"


def push_key(step: int, read_version: int, token: str, form: str, then: int | None = None) -> str:
    key = f"{PUSH}/{step}/{read_version}/{token}/{form}"
    return key if then is None else f"{key}/{then}"


def report_key(token: str) -> str:
    return f"{REPORT}/{token}"


def grant_key(step: int, token: str) -> str:
    return f"grant/{step}/{token}"


def values_key(step: int, token: str) -> str:
    return f"values/{step}/{token}"


def ack_key(step: int, token: str) -> str:
    return f"ack/{step}/{token}"


def open_envelope(key: str) -> Envelope:
    """The fields of a worker's message key; anything else is refused by name.

    Examples
    --------
    >>> open_envelope(push_key(7, 6, "ab12", DENSE))
    Envelope(kind='push', token='ab12', step=7, version=6, form='dense', then=None)
    >>> open_envelope(push_key(7, 6, "ab12", DENSE, then=8)).then
    8
    >>> open_envelope("grant/7/ab12")
    Traceback (most recent call last):
    ...
    ValueError: not a worker's message to a shard: 'grant/7/ab12'
    """
    kind, *fields = key.split("/")
    if kind == PULL and len(fields) == 3:
        return Envelope(PULL, fields[2], int(fields[0]), int(fields[1]))
    if kind == PUSH and len(fields) in (4, 5) and fields[3] in (DENSE, PICKLED):
        then = int(fields[4]) if len(fields) == 5 else None
        return Envelope(PUSH, fields[2], int(fields[0]), int(fields[1]), fields[3], then)
    if kind == REPORT and len(fields) == 1:
        return Envelope(REPORT, fields[0])
    raise ValueError(f"not a worker's message to a shard: {key!r}")


def grant_header(version: int, done: bool) -> np.ndarray:
    return np.array([version, int(done)], np.int64)


def read_grant(header: np.ndarray) -> tuple[int, bool]:
    """(version, done) of a grant."""
    return int(header[0]), bool(header[1])


def ack_header(staleness: int | None, dropped: bool, version: int) -> np.ndarray:
    return np.array([-1 if staleness is None else staleness, int(dropped), version], np.int64)


def read_ack(header: np.ndarray) -> dict[str, Any]:
    """A push's answer: staleness (None: applied later, sync), whether it was dropped, and
    the shard's version after it.

    Examples
    --------
    >>> read_ack(ack_header(None, False, 4))
    {'staleness': None, 'dropped': False, 'version': 4}
    """
    staleness = int(header[0])
    return {
        "staleness": None if staleness < 0 else staleness,
        "dropped": bool(header[1]),
        "version": int(header[2]),
    }


def pickled(value: Any) -> np.ndarray:
    """``value`` as bytes a channel carries (the run's own processes only read them)."""
    return np.frombuffer(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL), np.uint8)


def unpickled(payload: np.ndarray) -> Any:
    return pickle.loads(payload.tobytes())
