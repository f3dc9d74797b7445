"""One run as a listing shows it, whatever state its directory is in.

A listing must never fail because of one run: a status.json cut short by a crash, a file
that is not JSON or not an object, a run that wrote NaN. :class:`RunEntry` holds what could
be read, with every non-finite number as None, and says what was wrong: ``damage`` (the
entry's state is then ``damaged``) and ``non_finite`` (the fields that held NaN or an
infinity, in this run's files or as the run recorded them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DAMAGED = "damaged"


@dataclass(frozen=True)
class RunEntry:
    """A run of the store as read for a listing (see the module docstring)."""

    run_id: str
    path: Path
    config: dict[str, Any]
    status: dict[str, Any]
    state: str
    damage: str | None = None
    non_finite: list[str] = field(default_factory=list)

    @property
    def started(self) -> float | None:
        started = self.status.get("started")
        if isinstance(started, int | float) and not isinstance(started, bool):
            return float(started)
        return None

    @property
    def recording(self) -> bool:
        """Whether the run's process may still add to its record: it is running, or its last
        step is in (``finished``) but its summary and end are still to come."""
        return self.state == "running" or (
            self.state == "finished" and self.status.get("ended") is None
        )
