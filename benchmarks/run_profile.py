"""Where a whole run's time goes: ``dtrain run`` in a process of its own, trained exactly as the
command trains it (the run store, the dashboard publisher, progress), that also writes a
profile of itself to a file.

``python -m benchmarks.run_profile OUT.json RUN FLAGS...`` parses the flags, prepares and
trains the run recorded in the run store like ``dtrain run``, with one more cluster observer:
just before the cluster closes (every step, the snapshot and the test evaluation done) it
takes the CPU seconds of every thread of this process (the client, and the scheduler of a
local cluster), of every worker process (through ``Client.run``) and of the nannies, and the
devices' timeline from the run's phase events. The e2e suite profiles a short and a long run
and divides their difference by the steps between them, so that everything paid once
(imports, start-up, evaluation, the profile itself) cancels out.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil

from workbench.events import EventLog
from workbench.launch.flags import parse_run_flags
from workbench.launch.run_link import RunLink, new_run_id
from workbench.launch.runner import prepare_run
from workbench.store import RunStore


def thread_cpu_seconds() -> dict[str, float]:
    """CPU seconds (user + system) of this process by thread, threads named alike summed
    (``ThreadPoolExecutor-0_0`` and ``-1_0`` both read ``ThreadPoolExecutor``); ``(ended
    threads)`` is what threads no longer alive used, ``(total)`` the whole process."""
    process = psutil.Process()
    names = {thread.native_id: thread.name for thread in threading.enumerate()}
    parts: dict[str, float] = defaultdict(float)
    for thread in process.threads():
        name = names.get(thread.id, "(threads outside Python)")
        parts[re.sub(r"^\d+-|[-_]\d+", "", name)] += thread.user_time + thread.system_time
    times = process.cpu_times()
    total = times.user + times.system
    parts["(ended threads)"] = max(total - sum(parts.values()), 0.0)
    parts["(total)"] = total
    return dict(parts)


def _process_cpu_seconds(process: psutil.Process) -> float:
    with contextlib.suppress(psutil.Error):
        times = process.cpu_times()
        return times.user + times.system
    return 0.0


# The client logs a round's losses together once the round is back (workbench/parallel/
# step_loop.py), microseconds apart; the next round's come a round later.
ROUND_GAP_S = 1e-3


def round_starts(log: EventLog) -> set[int]:
    """The first step of each round but the run's first, read from when each step's loss was
    logged: rounds grow with fast steps, so their bounds are not a fixed multiple."""
    losses = sorted(log.scalars("loss"), key=lambda event: event.step)
    return {
        later.step
        for earlier, later in itertools.pairwise(losses)
        if later.time - earlier.time > ROUND_GAP_S
    }


def device_timeline(log: EventLog) -> dict[str, float]:
    """Seconds summed over the run's steps, averaged over devices: ``busy`` (each step's span,
    from its first phase's start to its last phase's end), ``gaps_in_task`` (between two steps
    of one task: what a device does per step outside its phases), ``gaps_between_tasks``
    (between a task's last step and the next task's first: the round trip through the client
    and the scheduler), and each phase's own total (``phase:NAME``, overlapping phases each
    counted)."""
    spans: dict[str, dict[int, list[float]]] = defaultdict(dict)
    phases: dict[str, float] = defaultdict(float)
    for event in log.phases():
        span = spans[event.device].setdefault(event.step, [event.start, event.end])
        span[0], span[1] = min(span[0], event.start), max(span[1], event.end)
        phases[f"phase:{event.phase}"] += event.duration
    totals: dict[str, float] = defaultdict(float)
    starts = round_starts(log)
    for by_step in spans.values():
        steps = sorted(by_step)
        totals["busy"] += sum(by_step[step][1] - by_step[step][0] for step in steps)
        for before, after in itertools.pairwise(steps):
            gap = max(by_step[after][0] - by_step[before][1], 0.0)
            totals["gaps_between_tasks" if after in starts else "gaps_in_task"] += gap
    devices = max(len(spans), 1)
    return {name: value / devices for name, value in {**totals, **phases}.items()}


def device_phases(log: EventLog) -> dict[str, dict[str, float]]:
    """Seconds each device spent in each kind of phase over the run (``compute``, ``send``,
    ``recv``, ``ps-pull``, ...), and ``outside phases``: the rest of its steps' spans and the
    gaps between them, from its first phase's start to its last phase's end (what the device's
    thread did between phases: dispatch, bookkeeping, waiting for a core)."""
    totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    for event in log.phases():
        totals[event.device][str(event.phase)] += event.duration
        first[event.device] = min(first.get(event.device, event.start), event.start)
        last[event.device] = max(last.get(event.device, event.end), event.end)
    for device, phases in totals.items():
        covered = sum(phases.values())
        phases["outside phases"] = max(last[device] - first[device] - covered, 0.0)
    return {device: dict(phases) for device, phases in totals.items()}


class ProfileObserver:
    """A cluster observer whose ``watch``, when left, keeps the run's profile in ``result``."""

    def __init__(self) -> None:
        self.result: dict[str, Any] = {}

    def scheduler_options(self) -> dict:
        return {}

    @contextlib.contextmanager
    def watch(self, session, strategy: str, job, log: EventLog, progress) -> Iterator[None]:
        entered = time.perf_counter(), _cpu_seconds(session)
        yield
        left = time.perf_counter(), _cpu_seconds(session)
        self.result = {
            "cluster_seconds": left[0] - entered[0],
            **_difference(left[1], entered[1]),
            "timeline": device_timeline(log),
            "device_phases": device_phases(log),
        }


def _cpu_seconds(session) -> dict[str, Any]:
    """CPU seconds so far of this process's threads, of each worker's, and of the other
    processes this one started (a local cluster's nannies)."""
    addresses = list(session.addresses)
    workers = session.client.run(thread_cpu_seconds, workers=addresses)
    worker_pids = set(session.client.run(os.getpid, workers=addresses).values())
    children = psutil.Process().children(recursive=True)
    return {
        "client_cpu": thread_cpu_seconds(),
        "worker_cpu": [workers[address] for address in addresses],
        "other_processes_cpu": sum(
            _process_cpu_seconds(child) for child in children if child.pid not in worker_pids
        ),
    }


def _difference(later: Any, earlier: Any) -> Any:
    """``later - earlier``, field by field through dicts and lists (a thread that started in
    between counts from 0)."""
    if isinstance(later, dict):
        return {key: _difference(value, earlier.get(key, 0.0)) for key, value in later.items()}
    if isinstance(later, list):
        return [_difference(a, b) for a, b in zip(later, earlier)]
    return later - earlier


def profiled_run(out: Path, argv: Sequence[str]) -> dict[str, Any]:
    """Train ``dtrain run ARGV`` as the command does, recorded in the run store; write and
    return the run's summary with its profile."""
    started = time.perf_counter()
    prepared = prepare_run(parse_run_flags(argv))
    observer = ProfileObserver()
    job = replace(prepared.job, observers=[*prepared.job.observers, observer])
    prepared = replace(prepared, job=job)
    store = RunStore()
    link = RunLink(store, new_run_id(prepared.config.strategy), prepared.job, EventLog()).start()
    result = link.train(prepared, lambda line: None)
    profile = {
        **observer.result,
        "process_seconds": time.perf_counter() - started,
        "summary": result.summary,
    }
    out.write_text(json.dumps(profile))
    return profile


if __name__ == "__main__":
    profiled_run(Path(sys.argv[1]), sys.argv[2:])
