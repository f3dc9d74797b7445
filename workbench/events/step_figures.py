"""Per-step figures from phase events as they arrive: samples/s, and each device's busy
fraction and traffic (what a TensorBoard run plots against the global step).

A run's events do not arrive step by step: a cluster run logs a whole chunk of steps, device
after device, before that chunk's losses, and an asynchronous parameter server's workers report
interleaved steps. So a device's step is complete when that device reports another step or a
``loss`` at that step or later arrives (each device reports a step's events together, and a
step's loss after them); the run's pace is measured between the steps that have a loss.
"""

from __future__ import annotations

from dataclasses import dataclass

from workbench.events.records import BUSY_PHASES, PhaseEvent


@dataclass(frozen=True)
class DeviceStep:
    """What device ``device`` did in global step ``step``: ``utilization`` is its busy time
    (compute and update) over the time since its previous step ended."""

    device: str
    step: int
    utilization: float
    bytes_sent: int
    bytes_received: int


@dataclass
class _OpenStep:
    step: int
    start: float
    end: float
    busy: float = 0.0
    bytes_sent: int = 0
    bytes_received: int = 0

    def add(self, event: PhaseEvent) -> None:
        self.start, self.end = min(self.start, event.start), max(self.end, event.end)
        if event.phase in BUSY_PHASES:
            self.busy += event.duration
        self.bytes_sent += event.bytes
        self.bytes_received += event.bytes_received


class StepFigures:
    """Folds phase events into per-step figures; feed it every event in arrival order.

    Examples
    --------
    One device computing 0.5 s of each 1 s step, at batch 32:

    >>> from workbench.events.records import Phase
    >>> figures = StepFigures(batch_size=32)
    >>> for step in range(3):
    ...     figures.add_phase(PhaseEvent("gpu0", Phase.COMPUTE, step, step + 0.5, step + 1.0))
    >>> figures.loss_seen(0), figures.loss_seen(1)
    (None, 32.0)
    >>> [(d.step, d.utilization) for d in figures.complete_devices()]
    [(0, 1.0), (1, 0.5)]
    >>> [(d.step, d.utilization) for d in figures.drain()]
    [(2, 0.5)]
    """

    def __init__(self, batch_size: int) -> None:
        self.batch_size = batch_size
        self._open: dict[str, _OpenStep] = {}  # each device's step still being reported
        self._last_end: dict[str, float] = {}  # each device's previous step's end
        self._done: list[DeviceStep] = []
        self._step_end: dict[int, float] = {}  # the latest end seen in each step with no loss
        self._paced: tuple[int, float] | None = None  # (step, end) of the last loss's step

    def add_phase(self, event: PhaseEvent) -> None:
        current = self._open.get(event.device)
        if current is not None and current.step != event.step:
            self._close(event.device)
            current = None
        if current is None:
            self._open[event.device] = _OpenStep(event.step, event.start, event.end)
        self._open[event.device].add(event)
        self._step_end[event.step] = max(self._step_end.get(event.step, event.end), event.end)

    def loss_seen(self, step: int) -> float | None:
        """Note the loss of ``step``: its devices' figures are complete; returns the samples/s
        since the previous step with a loss (None for the first, or a step with no phases)."""
        for device, current in list(self._open.items()):
            if current.step <= step:
                self._close(device)
        end = self._step_end.pop(step, None)
        for earlier in [s for s in self._step_end if s < step]:
            del self._step_end[earlier]  # their loss never comes (or came first): not needed
        if end is None:
            return None
        previous, self._paced = self._paced, (step, end)
        if previous is None or step <= previous[0] or end <= previous[1]:
            return None  # the first step, or one recomputed after a restart
        return (step - previous[0]) * self.batch_size / (end - previous[1])

    def complete_devices(self) -> list[DeviceStep]:
        """The device steps completed since the last call, in completion order."""
        done, self._done = self._done, []
        return done

    def drain(self) -> list[DeviceStep]:
        """Complete every step still open (the run ended) and return what was not yet taken."""
        for device in list(self._open):
            self._close(device)
        return self.complete_devices()

    def _close(self, device: str) -> None:
        current = self._open.pop(device)
        # The step's share of the device's time runs from its previous step's end; a first
        # step (or one after a restart's rewind) has only its own span.
        since = self._last_end.get(device, current.start)
        window = current.end - (since if since < current.end else current.start)
        self._last_end[device] = current.end
        # Busy phases do not overlap on a device, but rounding can push a tiny step over 1.
        utilization = min(1.0, current.busy / window) if window > 0 else 0.0
        self._done.append(
            DeviceStep(
                device, current.step, utilization, current.bytes_sent, current.bytes_received
            )
        )
