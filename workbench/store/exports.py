"""A run's events in the formats other tools read: Chrome-trace JSON for the timeline (one
process per device, as Horovod's timeline and the PyTorch profiler write it; open it in
chrome://tracing or Perfetto) and CSV for the per-step scalars."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable

from workbench.events.records import PhaseEvent, ScalarEvent


def chrome_trace(events: Iterable[PhaseEvent | ScalarEvent]) -> dict:
    """The Trace Event Format: a complete ("X") event per phase interval, in microseconds, one
    process (``pid``) per device named by a metadata event; scalars become counter ("C")
    events on a "scalars" process.

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
            trace.append(
                {
                    "name": event.phase,
                    "cat": event.phase,
                    "ph": "X",
                    "pid": process(event.device),
                    "tid": 0,
                    "ts": event.start * 1e6,
                    "dur": (event.end - event.start) * 1e6,
                    "args": {
                        "step": event.step,
                        "bytes_sent": event.bytes,
                        "bytes_received": event.bytes_received,
                        **({"path": event.path} if event.path else {}),
                    },
                }
            )
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


def write_chrome_trace(events: Iterable[PhaseEvent | ScalarEvent], path: str) -> None:
    with open(path, "w", encoding="utf-8") as out:
        json.dump(chrome_trace(events), out)


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
