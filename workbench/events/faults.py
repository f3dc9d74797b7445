"""What a run's fault events add up to, for everything that shows a run in a line: the run
store's status.json, the notebook panel's status line (and through the store, the JupyterLab
sidebar). docs/architecture/events.md, "Events", lists the events.

In: events, in arrival order, fed one at a time to :meth:`FaultTally.add`. Out: ``restarts``
(restarts so far), ``failures`` (failure phases seen), ``dropped_updates`` (gradient pushes the
parameter server discarded so far), ``recovery_seconds`` (one per restart),
``failure_reasons`` (a short line per failure: its step, device and reason, and the step the run
restarted from when it did) and, while a failure has been noticed but no recovery has followed
yet, that failure.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from workbench.events.records import Phase, PhaseEvent, ScalarEvent

# Scalars the tally reads; the fault phases are records.FAULT_PHASES.
FAULT_SCALARS = ("restarts", "recovery_seconds", "dropped_updates")
REASONS_KEPT = 20  # the latest failures' reasons (status.json stays small); ``failures`` counts all
REASON_CHARS = 240  # a longer reason is cut (it names the device and the error first)


@dataclass
class FaultTally:
    """Fault counts of one run so far.

    Examples
    --------
    >>> tally = FaultTally()
    >>> tally.add(PhaseEvent("/task:1", Phase.FAILURE, 12, 3.0, 3.0, reason="task1-cpu0: died"))
    True
    >>> tally.pending_failure.step, tally.line()
    (12, '')
    >>> tally.add(ScalarEvent("restarts", 12, 1, 4.5))
    True
    >>> tally.add(ScalarEvent("dropped_updates", 14, 3, 5.0))
    True
    >>> tally.status()["restarts"], tally.line()
    (1, 'restarts 1 · dropped 3')
    >>> tally.failure_reasons
    ['step 12, task1-cpu0: died; restarted from step 12']
    """

    restarts: int = 0
    failures: int = 0
    dropped_updates: int = 0
    recovery_seconds: list[float] = field(default_factory=list)
    failure_reasons: list[str] = field(default_factory=list)
    # The last failure noticed, until a recovery phase says the run got over it.
    pending_failure: PhaseEvent | None = None
    _restart_noted: bool = field(default=True, repr=False)  # the latest failure's restart

    def add(self, event: PhaseEvent | ScalarEvent) -> bool:
        """Count ``event`` if it tells of a fault; True if it did."""
        if isinstance(event, PhaseEvent):
            return self._phase(event)
        return self._scalar(event)

    def _phase(self, event: PhaseEvent) -> bool:
        if event.phase == Phase.FAILURE:
            self.failures += 1
            self.pending_failure = event
            if event.reason:  # records written before failures carried one have none
                self._add_reason(f"step {event.step}, {event.reason}")
                self._restart_noted = False
            return True
        if event.phase == Phase.RECOVERY:
            # Every device of the restored run logs one; any of them ends the wait.
            if self.pending_failure is not None and event.end >= self.pending_failure.start:
                self.pending_failure = None
            return True
        return event.phase == Phase.DROPPED

    def _scalar(self, event: ScalarEvent) -> bool:
        if event.name == "recovery_seconds":
            self.recovery_seconds.append(float(event.value))
        elif event.name == "restarts":
            # Cumulative counts: the largest seen is the latest, even when devices' batches of
            # events arrive out of order.
            self.restarts = max(self.restarts, int(event.value))
            if self.failure_reasons and not self._restart_noted:
                self._restart_noted = True
                self.failure_reasons[-1] += f"; restarted from step {event.step}"
        elif event.name == "dropped_updates":
            self.dropped_updates = max(self.dropped_updates, int(event.value))
        else:
            return False
        return True

    def _add_reason(self, line: str) -> None:
        if len(line) > REASON_CHARS:
            line = line[: REASON_CHARS - 1] + "…"
        self.failure_reasons = [*self.failure_reasons, line][-REASONS_KEPT:]

    def status(self) -> dict:
        """The status.json fields (docs: workbench/store/run_store.py)."""
        return {
            "restarts": self.restarts,
            "failures": self.failures,
            "dropped_updates": self.dropped_updates,
            "recovery_seconds": list(self.recovery_seconds),
            "failure_reasons": list(self.failure_reasons),
        }

    def line(self) -> str:
        """``restarts 2 · dropped 14``, naming only what is nonzero ("" for a clean run)."""
        parts = []
        if self.restarts:
            parts.append(f"restarts {self.restarts}")
        if self.dropped_updates:
            parts.append(f"dropped {self.dropped_updates}")
        return " · ".join(parts)


def failure_reasons(events: Iterable[PhaseEvent | ScalarEvent]) -> list[str]:
    """The ``failure_reasons`` of a run's events, as status.json has them (the ``--json``
    summary's)."""
    tally = FaultTally()
    for event in events:
        tally.add(event)
    return tally.failure_reasons
