"""A run's events in the formats other tools read: Chrome-trace JSON for the timeline (one
process per device, as Horovod's timeline and the PyTorch profiler write it; open it in
chrome://tracing or Perfetto) and CSV for the per-step scalars.

Fault phases (docs/architecture/events.md, "Events") carry the category ``fault`` besides their
phase, so a trace viewer can pick them out: a failure, which has no length, is an instant
event on its device's thread; a recovery and a dropped push are complete events like any
phase. The ``restarts`` and ``dropped_updates`` scalars are counters like every scalar.

A pipeline stage's compute is named by its schedule's action (``F3``, ``B3``, ``I3``, ``W3``,
``F3@1``; ``PhaseEvent.action``), so a trace viewer writes the schedule on each stage's row; its
category stays ``compute`` and its args carry the action too."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable

from workbench.events.records import FAULT_PHASES, PhaseEvent, ScalarEvent
from workbench.safe_io import strict_dumps


def chrome_trace(events: Iterable[PhaseEvent | ScalarEvent]) -> dict:
    """The Trace Event Format: a complete ("X") event per phase interval, in microseconds, one
    process (``pid``) per device named by a metadata event (a failure is an instant, "i",
    event there); scalars become counter ("C") events on a "scalars" process.

    Examples
    --------
    >>> trace = chrome_trace([PhaseEvent("/task:0", "compute", 0, 0.5, 0.75)])
    >>> [e["ph"] for e in trace["traceEvents"]], trace["traceEvents"][1]["dur"]
    (['M', 'X'], 250000.0)
    """
    process_of: dict[str, int] = {}
    trace: list[dict] = []

    def process(name: str) -> int:
        if name not in process_of:
            process_of[name] = len(process_of)
            trace.append(
                {"name": "process_name", "ph": "M", "pid": process_of[name], "args": {"name": name}}
            )
        return process_of[name]

    for event in events:
        if isinstance(event, PhaseEvent):
            trace.append(_phase_event(event, process(event.device)))
        else:
            trace.append(
                {
                    "name": event.name,
                    "ph": "C",
                    "pid": process(event.device or "scalars"),
                    "ts": event.time * 1e6,
                    "args": {event.name: event.value},
                }
            )
    return {"traceEvents": trace, "displayTimeUnit": "ms"}


def _phase_event(event: PhaseEvent, pid: int) -> dict:
    """One phase as a trace event on thread 0 of its device's process."""
    args = {
        "step": event.step,
        "bytes_sent": event.bytes,
        "bytes_received": event.bytes_received,
        **({"path": event.path} if event.path else {}),
        **({"action": event.action} if event.action else {}),
    }
    fault = event.phase in FAULT_PHASES
    common = {
        "name": event.action or event.phase,
        # Categories are a comma-separated list: "fault" gathers the three fault phases.
        "cat": f"fault,{event.phase}" if fault else event.phase,
        "pid": pid,
        "tid": 0,
        "ts": event.start * 1e6,
    }
    if event.phase == "failure":  # a moment: a zero-length "X" event would not be drawn
        why = {"reason": event.reason} if event.reason else {}
        return {**common, "ph": "i", "s": "t", "args": {"step": event.step, **why}}
    return {**common, "ph": "X", "dur": (event.end - event.start) * 1e6, "args": args}


def write_chrome_trace(events: Iterable[PhaseEvent | ScalarEvent], path: str) -> None:
    with open(path, "w", encoding="utf-8") as out:
        out.write(strict_dumps(chrome_trace(events)))


SCALAR_COLUMNS = ("step", "name", "value", "time", "device")


def scalars_csv(events: Iterable[PhaseEvent | ScalarEvent]) -> str:
    """One row per scalar event: step, name, value, time (s since the run started), device.

    Examples
    --------
    >>> print(scalars_csv([ScalarEvent("loss", 0, 2.5, 0.1)]).strip())
    step,name,value,time,device
    0,loss,2.5,0.1,
    """
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(SCALAR_COLUMNS)
    for event in events:
        if isinstance(event, ScalarEvent):
            writer.writerow([event.step, event.name, event.value, event.time, event.device or ""])
    return buffer.getvalue()
