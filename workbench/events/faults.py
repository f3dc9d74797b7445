"""What a run's fault events add up to, for everything that shows a run in a line: the run
store's status.json, the notebook panel's status line (and through the store, the JupyterLab
sidebar). docs/architecture.md, "Events", lists the events.

In: events, in arrival order, fed one at a time to :meth:`FaultTally.add`. Out: ``restarts``
(restarts so far), ``failures`` (failure phases seen), ``dropped_updates`` (gradient pushes the
parameter server discarded so far), ``recovery_seconds`` (one per restart) and, while a failure
has been noticed but no recovery has followed yet, that failure.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from workbench.events.records import PhaseEvent, ScalarEvent

# Scalars the tally reads; the fault phases are records.FAULT_PHASES.
FAULT_SCALARS = ("restarts", "recovery_seconds", "dropped_updates")


@dataclass
class FaultTally:
    """Fault counts of one run so far.

    Examples
    --------
    >>> tally = FaultTally()
    >>> tally.add(PhaseEvent("/task:1", "failure", 12, 3.0, 3.0))
    True
    >>> tally.pending_failure.step, tally.line()
    (12, '')
    >>> tally.add(ScalarEvent("restarts", 12, 1, 4.5))
    True
    >>> tally.add(ScalarEvent("dropped_updates", 14, 3, 5.0))
    True
    >>> tally.status()["restarts"], tally.line()
    (1, 'restarts 1 · dropped 3')
    """

    restarts: int = 0
    failures: int = 0
    dropped_updates: int = 0
    recovery_seconds: list[float] = field(default_factory=list)
    # The last failure noticed, until a recovery phase says the run got over it.
    pending_failure: PhaseEvent | None = None

    def add(self, event: PhaseEvent | ScalarEvent) -> bool:
        """Count ``event`` if it tells of a fault; True if it did."""
        if isinstance(event, PhaseEvent):
            return self._phase(event)
        return self._scalar(event)

    def _phase(self, event: PhaseEvent) -> bool:
        if event.phase == "failure":
            self.failures += 1
            self.pending_failure = event
            return True
        if event.phase == "recovery":
            # Every device of the restored run logs one; any of them ends the wait.
            if self.pending_failure is not None and event.end >= self.pending_failure.start:
                self.pending_failure = None
            return True
        return event.phase == "dropped"

    def _scalar(self, event: ScalarEvent) -> bool:
        if event.name == "recovery_seconds":
            self.recovery_seconds.append(float(event.value))
        elif event.name == "restarts":
            # Cumulative counts: the largest seen is the latest, even when devices' batches of
            # events arrive out of order.
            self.restarts = max(self.restarts, int(event.value))
        elif event.name == "dropped_updates":
            self.dropped_updates = max(self.dropped_updates, int(event.value))
        else:
            return False
        return True

    def status(self) -> dict:
        """The status.json fields (docs: workbench/store/run_store.py)."""
        return {
            "restarts": self.restarts,
            "failures": self.failures,
            "dropped_updates": self.dropped_updates,
            "recovery_seconds": list(self.recovery_seconds),
        }

    def line(self) -> str:
        """``restarts 2 · dropped 14``, naming only what is nonzero ("" for a clean run)."""
        parts = []
        if self.restarts:
            parts.append(f"restarts {self.restarts}")
        if self.dropped_updates:
            parts.append(f"dropped {self.dropped_updates}")
        return " · ".join(parts)
