"""A small process that outlives a client killed with ``kill -9``, and then removes what the
client's local cluster left on this host: the run directories on /dev/shm and the Dask
scratch directory (docs/security.md, "After a crash: ``dtrain gc``").

Multiprocessing's resource tracker does this for named segments; the workbench's objects
are directories, which it cannot remove. The janitor waits on a pipe from the client, without
importing anything. A client that ends normally writes one byte first and the janitor exits;
a pipe closed without it means the client died, and the janitor sweeps, for a few seconds,
whatever of this user's no live process holds any more (the worker processes exit once their
parent is gone).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time

CLEAN_EXIT = b"0"
SWEEP_SECONDS = 15.0  # time for the orphaned workers to notice and exit
_WAIT_THEN_SWEEP = f"""
import sys
if sys.stdin.buffer.read(1) != {CLEAN_EXIT!r}:
    from workbench.runtime.janitor import sweep_after_crash
    sweep_after_crash()
"""


class Janitor:
    """The client's end of a janitor's pipe; :meth:`close` tells it the client ended well."""

    def __init__(self, process: subprocess.Popen) -> None:
        self._process = process

    def close(self) -> None:
        stdin = self._process.stdin
        if stdin is None or stdin.closed:
            return
        try:
            stdin.write(CLEAN_EXIT)
            stdin.close()
        except OSError:
            return  # it is gone already: nothing to tell
        self._process.wait(5)


def start_janitor() -> Janitor:
    """A janitor for this process (in a session of its own, so a Ctrl-C or a kill of the
    client's process group does not take it along)."""
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    paths = [package_root, os.environ.get("PYTHONPATH", "")]
    process = subprocess.Popen(
        [sys.executable, "-c", _WAIT_THEN_SWEEP],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(path for path in paths if path)},
    )
    return Janitor(process)


def sweep_after_crash(seconds: float = SWEEP_SECONDS) -> None:
    """Sweep this user's stale run and scratch directories until ``seconds`` have passed
    (what a still-exiting worker holds goes on a later round)."""
    from workbench.runtime.scratch import sweep_stale_scratch_directories
    from workbench.runtime.shared_memory import sweep_stale_run_directories

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for sweep in (sweep_stale_run_directories, sweep_stale_scratch_directories):
            with contextlib.suppress(OSError):  # a later round tries again
                sweep()
        time.sleep(0.5)
