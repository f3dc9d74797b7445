"""Run summaries computed from events only: throughput, busy fractions, bytes per device."""

from __future__ import annotations

from workbench.events.log import EventLog
from workbench.events.records import BUSY_PHASES, Phase


def warmup_steps(total_steps: int) -> int:
    """Steps excluded from steady-state figures: the first 10%, at least 1, at most 20 (they pay
    for first-touch allocation and cache warm-up, not for the strategy)."""
    return 0 if total_steps < 3 else min(20, max(1, total_steps // 10))


def summarize(
    log: EventLog, devices: list[str], global_batch_size: int, first_step: int = 0
) -> dict:
    """Steady-state samples/s and per-device busy fraction and traffic, from phase events."""
    phases = log.phases()
    steps = sorted({event.step for event in phases})
    skip = warmup_steps(len(steps))
    steady = {step for step in steps[skip:]}
    steady_events = [e for e in phases if e.step in steady]
    if steady_events:
        window_start = min(e.start for e in steady_events)
        window_end = max(e.end for e in steady_events)
        window = max(window_end - window_start, 1e-12)
        samples_per_second = len(steady) * global_batch_size / window
    else:
        window, samples_per_second = 0.0, 0.0
    per_device = []
    for device in devices:
        own = [e for e in steady_events if e.device == device]
        busy = sum(e.duration for e in own if e.phase in BUSY_PHASES)
        per_device.append(
            {
                "device": device,
                "busy_fraction": round(busy / window, 6) if window else 0.0,
                "bytes_sent": sum(e.bytes for e in phases if e.device == device),
                "bytes_received": sum(e.bytes_received for e in phases if e.device == device),
            }
        )
    return {
        "samples_per_second": samples_per_second,
        "steady_steps": len(steady),
        "warmup_steps_excluded": skip,
        "bytes_communicated": sum(d["bytes_sent"] for d in per_device),
        "per_device": per_device,
    }


def bubble_fraction(log: EventLog, devices: list[str]) -> float | None:
    """Share of device-time spent not computing during steady steps, as GPipe defines it: for
    each step, 1 - (forward/backward compute time of all devices) / (devices x the span from
    the step's first compute to its last), averaged over steady steps. For GPipe with even
    stages the theory is (P-1)/(M+P-1).

    The span starts at the first compute, not at the first event: a later stage posts the
    receive for its first activation as soon as it finished the previous step, while the first
    stage still runs that step's last backward and its update. Counting that wait in both
    steps' spans would charge the flush twice (and the optimizer update, which the theory
    leaves out, once).

    Examples
    --------
    Two stages, two micro-batches, forward 1 and backward 2 time units: GPipe's (P-1)/(M+P-1)
    is 1/3. Stage 1 posts its receive at t=-2, while stage 0 still finishes the step before.

    >>> from workbench.events.records import PhaseEvent
    >>> log = EventLog()
    >>> log.emit(PhaseEvent("s1", Phase.RECV, 0, -2, 1))
    >>> for device, start, end in [
    ...     ("s0", 0, 1), ("s0", 1, 2), ("s1", 1, 2), ("s1", 2, 3), ("s1", 3, 5),
    ...     ("s1", 5, 7), ("s0", 5, 7), ("s0", 7, 9)]:
    ...     log.emit(PhaseEvent(device, Phase.COMPUTE, 0, start, end))
    >>> round(bubble_fraction(log, ["s0", "s1"]), 4)
    0.3333
    """
    wanted = set(devices)
    steps: set[int] = set()
    computed_by_step: dict[int, list] = {}  # one pass: a run's events, grouped by step
    for event in log.phases():
        if event.device not in wanted:
            continue
        steps.add(event.step)
        if event.phase == Phase.COMPUTE:
            computed_by_step.setdefault(event.step, []).append(event)
    ordered = sorted(steps)
    fractions = []
    for step in ordered[warmup_steps(len(ordered)) :]:
        computed = computed_by_step.get(step)
        if not computed:
            continue
        span = max(e.end for e in computed) - min(e.start for e in computed)
        busy = sum(e.duration for e in computed)
        if span > 0:
            fractions.append(1.0 - busy / (len(devices) * span))
    return float(sum(fractions) / len(fractions)) if fractions else None
