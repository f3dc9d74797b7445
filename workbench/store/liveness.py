"""Whether the process that trains a run is still there, and whose it is.

A run's status.json names the process recording it (``pid``, ``hostname``). A run that says
it is running but whose process on this host has gone (killed with ``kill -9``, a crashed or
restarted kernel) can never end its own record: it is *lost*. A run on another host cannot
be checked from here and keeps its stated state.
"""

from __future__ import annotations

import os
import socket


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        return True
    except (OverflowError, ValueError):  # not a pid at all
        return False
    return True


def process_uid(pid: int) -> int | None:
    """The user id owning process ``pid`` (Linux's ``/proc``), None when unknown or gone."""
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except (OSError, ValueError):
        return None


def lost_reason(status: dict) -> str | None:
    """Why a run that says it is running is lost, or None (it is not, or cannot be told)."""
    pid, hostname = status.get("pid"), status.get("hostname")
    if (
        (status.get("state") or "running") == "running"
        and isinstance(pid, int)
        and not isinstance(pid, bool)
        and hostname == socket.gethostname()
        and pid > 0
        and not process_alive(pid)
    ):
        return (
            f"lost: its process {pid} on {hostname} ended without ending the run's record "
            "(killed, or its kernel died or restarted)"
        )
    return None


def run_state(status: dict) -> str:
    """``status["state"]``, except ``lost`` for a run whose process has gone
    (:func:`lost_reason`)."""
    state = status.get("state") or "running"
    if not isinstance(state, str):
        return "damaged"
    return "lost" if lost_reason(status) is not None else state
