"""What a simulation produces: every action's interval, and per-device totals.

Each interval is one action on one (device, stream): a compute, a send (from posting it to
the last byte put on the link, waiting for a busy link included), a receive (from posting it to
the message's arrival; zero long when it had already arrived) or a whole vectorised ring
all-reduce. Signals and waits leave no interval: they only order streams.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cached_property

from workbench.events.records import BUSY_PHASES


@dataclass(frozen=True)
class Interval:
    """One action's time on a (device, stream).

    ``kind`` is the action's: ``compute``, ``send``, ``recv`` or ``collective``. ``sent`` and
    ``received`` are the bytes it moved out of and into the device.

    Examples
    --------
    >>> Interval("gpu0", "main", "send", "a0", 1.0, 2.0, "send", sent=10).duration
    1.0
    """

    device: str
    stream: str
    phase: str
    label: str
    start: float
    end: float
    kind: str
    sent: int = 0
    received: int = 0

    @property
    def duration(self) -> float:
        return self.end - self.start

    @property
    def nbytes(self) -> int:
        """The bytes this action moved, in either direction."""
        return self.sent + self.received


@dataclass(frozen=True)
class Timeline:
    """A simulated step: the intervals, when each device finished, how many events it took.

    Examples
    --------
    >>> timeline = Timeline(
    ...     (Interval("a", "main", "compute", "F0", 0.0, 2.0, "compute"),),
    ...     {"a": 2.0, "b": 0.0},
    ...     events=1,
    ... )
    >>> timeline.makespan, timeline.busy("a"), timeline.busy("b")
    (2.0, 2.0, 0.0)
    """

    intervals: tuple[Interval, ...]
    finish: dict[str, float]  # device -> when its last stream ended
    events: int = 0  # events the engine processed (a vectorised ring's steps included)

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(self.finish)

    @property
    def makespan(self) -> float:
        """When the last device finished (the step's time)."""
        return max(self.finish.values(), default=0.0)

    def busy(self, device: str, phases: Sequence[str] = BUSY_PHASES) -> float:
        """Seconds ``device`` spent in compute actions of ``phases``."""
        self._require(device)
        return float(
            sum(
                i.duration
                for i in self._by_device.get(device, ())
                if i.kind == "compute" and i.phase in phases
            )
        )

    def bytes_sent(self, device: str) -> int:
        self._require(device)
        return sum(i.sent for i in self._by_device.get(device, ()))

    def bytes_received(self, device: str) -> int:
        self._require(device)
        return sum(i.received for i in self._by_device.get(device, ()))

    def of(self, device: str, phase: str | None = None) -> list[Interval]:
        """``device``'s intervals (of one ``phase``, if given), in start order."""
        self._require(device)
        own = self._by_device.get(device, ())
        return sorted((i for i in own if phase is None or i.phase == phase), key=lambda i: i.start)

    def span(self, devices: Iterable[str], phase: str) -> tuple[float, float] | None:
        """The first start and last end of ``phase`` over ``devices`` (None if none ran)."""
        chosen = [i for d in devices for i in self.of(d, phase)]
        if not chosen:
            return None
        return min(i.start for i in chosen), max(i.end for i in chosen)

    @cached_property
    def _by_device(self) -> dict[str, list[Interval]]:
        grouped: dict[str, list[Interval]] = defaultdict(list)
        for interval in self.intervals:
            grouped[interval.device].append(interval)
        return dict(grouped)

    def _require(self, device: str) -> None:
        if device not in self.finish:
            raise KeyError(f"{device!r} is not one of the simulated devices")
