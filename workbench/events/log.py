"""An append-only, thread-safe event log with live subscribers (charts, run store)."""

from __future__ import annotations

import threading
from collections.abc import Callable

from workbench.events.records import Phase, PhaseEvent, ScalarEvent

Event = PhaseEvent | ScalarEvent


class EventLog:
    """Collects events in arrival order and forwards each one to every subscriber.

    Examples
    --------
    >>> log = EventLog()
    >>> seen = []
    >>> log.subscribe(seen.append)
    >>> log.scalar("loss", step=0, value=2.3, time=0.01)
    >>> seen[0].value, log.scalars("loss")[0].step
    (2.3, 0)
    """

    def __init__(self) -> None:
        self._events: list[Event] = []
        self._lock = threading.Lock()
        self._subscribers: list[Callable[[Event], None]] = []

    def subscribe(self, callback: Callable[[Event], None]) -> None:
        self._subscribers.append(callback)

    def emit(self, event: Event) -> None:
        with self._lock:
            self._events.append(event)
        for callback in self._subscribers:
            callback(event)

    def phase(
        self,
        device: str,
        phase: Phase,
        step: int,
        start: float,
        end: float,
        bytes: int = 0,
        bytes_received: int = 0,
        path: str = "",
    ) -> None:
        self.emit(PhaseEvent(device, phase, step, start, end, bytes, bytes_received, path))

    def scalar(
        self, name: str, step: int, value: float, time: float, device: str | None = None
    ) -> None:
        self.emit(ScalarEvent(name, step, float(value), time, device))

    @property
    def events(self) -> list[Event]:
        with self._lock:
            return list(self._events)

    def since(self, index: int) -> list[Event]:
        """Events from position ``index`` on (a reader keeps its position: live charts)."""
        with self._lock:
            return self._events[index:]

    def phases(self, device: str | None = None) -> list[PhaseEvent]:
        return [
            e
            for e in self.events
            if isinstance(e, PhaseEvent) and (device is None or e.device == device)
        ]

    def scalars(self, name: str) -> list[ScalarEvent]:
        return [e for e in self.events if isinstance(e, ScalarEvent) and e.name == name]
