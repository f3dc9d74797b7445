"""Whole processes as a user starts them, for the suites that measure what a user pays: the
``dtrain run`` command line of the checkout that is imported, and a timer around a process."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

_DTRAIN = "import sys; from workbench.cli.main import main; sys.exit(main())"


def dtrain_command(*arguments: str) -> list[str]:
    """``dtrain ARGUMENTS`` run by this interpreter, importing whichever workbench its
    ``PYTHONPATH`` (or installation) gives; run it outside a checkout (``python -c`` imports
    from its working directory first)."""
    return [sys.executable, "-c", _DTRAIN, *arguments]


def timed_process(
    command: Sequence[str], folder: Path, environment: dict[str, str] | None = None
) -> tuple[float, str]:
    """(wall seconds from start to exit, standard output) of ``command`` run in ``folder``;
    a failure raises with the end of its standard error."""
    start = time.perf_counter()
    done = subprocess.run(
        list(command), cwd=folder, env=environment, capture_output=True, text=True, check=False
    )
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(command[:4])} ... exited {done.returncode}:\n{done.stderr[-2000:]}"
        )
    return seconds, done.stdout
