"""What the live charts show, computed from events only, without Bokeh (docs/architecture/events.md,
"Events").

A :class:`ChartFeed` reads a run's event log from where it stopped last time and returns, per
chart, either rows to append (loss, throughput, timeline: streamed with rollover) or the whole
current table (utilization, traffic, stragglers: one row per device, replaced).

The fault phases (``failure``, ``recovery``, ``dropped``) go to timeline charts of their own
(``failures``, ``recoveries``, ``dropped``, same columns as ``timeline``), so the timeline draws
each its own way and lists only those a run had in its legend; they are neither compute nor
communication in the utilization bars, and failures and recoveries are no step's work in the
straggler view.

A pipeline stage's ``compute`` that carries its schedule's action (``F3``, ``B3``, ``I3``,
``W3``, ``F3@1``) goes to the ``actions`` timeline chart instead, with the action's kind,
micro-batch, chunk, colour and words (:mod:`workbench.charts.pipeline_actions`), so the timeline
colours it by kind; every other run's rows are the ``timeline`` rows they always were.

The devices' measured-memory reports go to the memory charts (``memory``, streamed;
``memory_split``, replaced: :mod:`workbench.charts.memory_data`).

The other phases also go to ``phase_shares`` (:mod:`workbench.charts.phase_shares`): the whole
run as per-interval phase shares, a few hundred rows at any run length, beside the detailed
timeline of its last steps.
"""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass, field

import numpy as np

from workbench.charts.memory_data import MemoryReports
from workbench.charts.phase_shares import PhaseShares
from workbench.charts.pipeline_actions import parse_action
from workbench.events import EventLog
from workbench.events.records import (
    BUSY_PHASES,
    COMMUNICATION_PHASES,
    Phase,
    PhaseEvent,
    ScalarEvent,
)

THROUGHPUT_WINDOW = 10  # steps the samples/s line averages over
UTILIZATION_WINDOW_S = 5.0  # seconds of recent activity the utilization bars describe
STRAGGLER_STEPS = 200  # recent steps the straggler view describes
GPU_SCALARS = ("gpu_utilization", "gpu_memory_used")  # NVML, per device, on GPUs only
# Fault phase -> the timeline chart its rows go to (the rest go to ``timeline``).
FAULT_TIMELINES = {
    Phase.FAILURE: "failures",
    Phase.RECOVERY: "recoveries",
    Phase.DROPPED: "dropped",
}
# The timeline chart of the computes that carry a pipeline schedule's action.
ACTIONS = "actions"
# Not work done for a step: a failure marks a moment, a recovery spans the restore.
NOT_STEP_WORK = (Phase.FAILURE, Phase.RECOVERY)


@dataclass
class ChartUpdate:
    """New rows to stream (``appended``) and tables to replace (``replaced``), by chart."""

    appended: dict[str, dict[str, list]] = field(default_factory=dict)
    replaced: dict[str, dict[str, list]] = field(default_factory=dict)

    def append(self, chart: str, **row) -> None:
        columns = self.appended.setdefault(chart, {name: [] for name in row})
        for name, value in row.items():
            columns[name].append(value)


class ChartFeed:
    """Turns a growing event log into chart updates; call :meth:`update` as often as wanted.

    Examples
    --------
    >>> log = EventLog()
    >>> log.phase("/task:0", Phase.COMPUTE, 0, 0.0, 0.2)
    >>> log.scalar("loss", 0, 2.3, 0.2)
    >>> update = ChartFeed(log, batch_size=32).update()
    >>> update.appended["loss"]["loss"], update.replaced["utilization"]["compute"]
    ([2.3], [1.0])
    """

    def __init__(self, log: EventLog, batch_size: int) -> None:
        self.log, self.batch_size = log, batch_size
        self._position = 0
        self._step_end: dict[int, float] = {}
        self._throughput_through = -1
        self._run_ended = False
        self._first_start = float("inf")
        self._latest = 0.0
        self._recent: deque[PhaseEvent] = deque()  # phases that may still be in the window
        self._sent: dict[str, int] = defaultdict(int)
        self._received: dict[str, int] = defaultdict(int)
        self._step_spans: dict[tuple[str, int], list[float]] = {}
        self._devices: list[str] = []
        self._gpu: dict[str, dict[str, float]] = defaultdict(dict)  # device -> latest NVML
        self._shares = PhaseShares()
        self._phases_seen: list[str] = []  # the order phase shares are laid out in
        self.memory = MemoryReports()

    def update(self) -> ChartUpdate:
        update = ChartUpdate()
        new = self.log.since(self._position)
        self._position += len(new)
        memory_reported = False
        for event in new:
            if isinstance(event, ScalarEvent):
                if self.memory.add(event):
                    memory_reported = True
                else:
                    self._scalar(event, update)
            else:
                self._phase(event, update)
        self._throughput(update)
        if memory_reported:
            segments = self.memory.new_segments()
            if segments["step"]:
                update.appended["memory"] = segments
            update.replaced["memory_split"] = self.memory.split()
        if any(isinstance(event, PhaseEvent) or event.name in GPU_SCALARS for event in new):
            update.replaced["utilization"] = self.utilization()
            update.replaced["traffic"] = self.traffic()
            update.replaced["traffic_notes"] = self.traffic_notes()
            update.replaced["stragglers"] = self.stragglers()
            update.replaced["phase_shares"] = self.phase_shares()
        return update

    def _scalar(self, event: ScalarEvent, update: ChartUpdate) -> None:
        if event.name == "loss":
            update.append("loss", step=event.step, loss=event.value, time=event.time)
        elif event.name in ("test_loss", "test_accuracy", "staleness"):
            update.append(event.name, step=event.step, value=event.value, time=event.time)
            if event.name == "test_loss":
                self._run_ended = True
        elif event.name in GPU_SCALARS and event.device is not None:
            self._gpu[event.device][event.name] = event.value

    def _throughput(self, update: ChartUpdate) -> None:
        """Samples/s over the last ``THROUGHPUT_WINDOW`` completed steps, from when each step's
        last phase ended on any device (loss values arrive in batches, their times do not tell
        when a step ran). A step is complete once a later one has begun, or the run ended."""
        seen = sorted(self._step_end)
        complete = seen if self._run_ended else seen[:-1]
        for index, step in enumerate(complete):
            if step <= self._throughput_through:
                continue
            earlier = complete[max(0, index - THROUGHPUT_WINDOW)]
            seconds = self._step_end[step] - self._step_end[earlier]
            if index > 0 and seconds > 0:
                rate = (index - max(0, index - THROUGHPUT_WINDOW)) * self.batch_size / seconds
                update.append("throughput", step=step, samples_per_second=rate)
            self._throughput_through = step
        if complete:  # every complete step is drawn: keep only the window the next ones need
            keep_from = complete[max(0, len(complete) - 1 - THROUGHPUT_WINDOW)]
            for step in [step for step in self._step_end if step < keep_from]:
                del self._step_end[step]

    def _phase(self, event: PhaseEvent, update: ChartUpdate) -> None:
        if event.device not in self._devices:
            self._devices.append(event.device)
        self._recent.append(event)
        self._latest = max(self._latest, event.end)
        while self._recent and self._recent[0].end < self._latest - UTILIZATION_WINDOW_S:
            self._recent.popleft()
        self._first_start = min(self._first_start, event.start)
        self._sent[event.device] += event.bytes
        self._received[event.device] += event.bytes_received
        if event.phase not in NOT_STEP_WORK:  # a recovery's seconds would pass for a slow step
            self._step_end[event.step] = max(self._step_end.get(event.step, event.end), event.end)
            self._step_span(event)
        if event.phase not in FAULT_TIMELINES:
            if event.phase not in self._phases_seen:
                self._phases_seen.append(event.phase)
            self._shares.add(event.device, event.phase, event.start, event.end)
        row = {
            "device": event.device,
            "phase": event.phase,
            "step": event.step,
            "start": event.start,
            "end": event.end,
            "bytes": event.bytes + event.bytes_received,
        }
        computed = bool(event.action) and event.phase == Phase.COMPUTE
        action = parse_action(event.action) if computed else None
        if action is not None:
            # The bar's middle: where its label goes, when the bar is wide enough for one.
            middle = (event.start + event.end) / 2
            update.append(ACTIONS, **row, **action.columns(), middle=middle)
        else:
            update.append(FAULT_TIMELINES.get(event.phase, "timeline"), **row)

    def _step_span(self, event: PhaseEvent) -> None:
        """Widen the device's span of ``event.step`` (the straggler view's step time)."""
        span = self._step_spans.setdefault((event.device, event.step), [event.start, event.end])
        if len(self._step_spans) > 4 * STRAGGLER_STEPS * max(1, len(self._devices)):
            self._forget_old_steps()
        span[0], span[1] = min(span[0], event.start), max(span[1], event.end)

    def _forget_old_steps(self) -> None:
        newest = max(step for _, step in self._step_spans)
        for key in [key for key in self._step_spans if key[1] <= newest - STRAGGLER_STEPS]:
            del self._step_spans[key]

    def utilization(self) -> dict[str, list]:
        """Per device, the share of the last ``UTILIZATION_WINDOW_S`` seconds (up to the newest
        event, from the first at most) spent computing, communicating and idle; and, on GPUs,
        NVML's latest utilization (as a share) and memory used (NaN where there is none).

        Compute is the summary's busy phases (compute, update); an ``idle`` phase and the
        fault phases count as idle (a recovery is time the device trains nothing)."""
        latest = self._latest
        since = max(self._first_start, latest - UTILIZATION_WINDOW_S)  # not the cluster's start
        window = latest - since or 1.0
        compute: dict[str, float] = defaultdict(float)
        communication: dict[str, float] = defaultdict(float)
        for event in self._recent:
            if event.end < since:
                continue
            overlap = event.end - max(event.start, since)
            if event.phase in COMMUNICATION_PHASES:
                communication[event.device] += overlap
            elif event.phase in BUSY_PHASES:
                compute[event.device] += overlap
        rows: dict[str, list] = {
            "device": list(self._devices),
            "compute": [],
            "communication": [],
            "idle": [],
            "gpu_utilization": [],
            "gpu_memory_used": [],
        }
        for device in self._devices:
            busy_compute = min(1.0, compute[device] / window)
            busy_communication = min(1.0 - busy_compute, communication[device] / window)
            rows["compute"].append(busy_compute)
            rows["communication"].append(busy_communication)
            rows["idle"].append(1.0 - busy_compute - busy_communication)
            gpu = self._gpu.get(device, {})
            rows["gpu_utilization"].append(gpu.get("gpu_utilization", np.nan) / 100)
            rows["gpu_memory_used"].append(gpu.get("gpu_memory_used", np.nan))
        return rows

    def phase_shares(self) -> dict[str, list]:
        """Per device and interval of the run, each phase's share of the interval (phases in
        the order the run first had them, so a step reads left to right)."""
        return self._shares.table(self._phases_seen)

    def traffic(self) -> dict[str, list]:
        return {
            "device": list(self._devices),
            "sent": [self._sent[device] for device in self._devices],
            "received": [self._received[device] for device in self._devices],
        }

    def traffic_notes(self) -> dict[str, list]:
        """The devices that moved no byte (a one-device or failed run), to say so on their
        row of the traffic chart rather than leave it blank."""
        quiet = [d for d in self._devices if self._sent[d] + self._received[d] == 0]
        return {"device": quiet, "note": ["no traffic"] * len(quiet)}

    def stragglers(self) -> dict[str, list]:
        """Per device, its step time (first phase start to last phase end) min/median/max
        over its last ``STRAGGLER_STEPS`` steps."""
        rows: dict[str, list] = {"device": [], "min": [], "median": [], "max": []}
        # None yet when the only phases so far are failures or recoveries.
        newest = max((step for _, step in self._step_spans), default=0)
        recent = [
            (owner, end - start)
            for (owner, step), (start, end) in self._step_spans.items()
            if step > newest - STRAGGLER_STEPS
        ]
        for device in self._devices:
            times = [duration for owner, duration in recent if owner == device] or [0.0]
            rows["device"].append(device)
            rows["min"].append(float(np.min(times)))
            rows["median"].append(float(np.median(times)))
            rows["max"].append(float(np.max(times)))
        return rows
