"""Dask's messages that are not news to a workbench user, kept out of the terminal and the
notebook.

A Stop or the end of a run closes the workers itself, and Dask's nannies then log that a worker
process was still alive and is killed, or that they restart a worker the run is ending; the
workbench reports a device that fails, and why, in its own words (its progress lines, the run's
record). Dask also warns of a "large graph" whenever a task carries the model's variables,
which the workbench sends on purpose. Only those lines are dropped: every other warning, and
every error, still shows.
"""

from __future__ import annotations

import logging
import re
import warnings

# (logger, message): matched from the start of the formatted message.
BENIGN_LOG_LINES: tuple[tuple[str, str], ...] = (
    ("distributed.nanny", r"Worker process still alive after [0-9.]+ seconds, killing"),
    ("distributed.nanny", r"Restarting worker \(status="),
)
LARGE_GRAPH_WARNING = r"Sending large graph of size"


class BenignLines(logging.Filter):
    """Drops a logger's records whose message matches one of ``patterns``, below ERROR."""

    def __init__(self, patterns: tuple[str, ...]) -> None:
        super().__init__()
        self.patterns = tuple(re.compile(pattern) for pattern in patterns)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR:
            return True
        message = record.getMessage()
        return not any(pattern.match(message) for pattern in self.patterns)


def quiet_dask_logs() -> None:
    """Drop the lines above in this process (the client's, where the local cluster's nannies
    run); installing twice changes nothing."""
    by_logger: dict[str, tuple[str, ...]] = {}
    for name, pattern in BENIGN_LOG_LINES:
        by_logger[name] = (*by_logger.get(name, ()), pattern)
    for name, patterns in by_logger.items():
        logger = logging.getLogger(name)
        if not any(isinstance(existing, BenignLines) for existing in logger.filters):
            logger.addFilter(BenignLines(patterns))
    # Re-adding an identical filter replaces it, so this too is idempotent.
    warnings.filterwarnings(
        "ignore", message=LARGE_GRAPH_WARNING, category=UserWarning, module=r"distributed\.client"
    )
