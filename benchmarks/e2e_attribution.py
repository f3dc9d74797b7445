"""Where the difference between ``bench ddp``'s steady state and the end-to-end figure goes.

For each trial of the e2e suite: ``mirrored`` trained as ``bench ddp`` trains it (a
``run_training`` from the bench process, its summary's steady-state samples/s), and a short
and a long profiled ``dtrain run`` (:mod:`benchmarks.run_profile`: the command's own code
path, the run store and the dashboard publisher included). The long run minus the short one,
per step, splits the end-to-end time into the devices' timeline (the steps' own spans, the gaps
between steps of one task, the gaps between tasks) and what lies outside it, and gives the CPU
each part of the system spent per step: on two cores, CPU the client and the scheduler use is
CPU the two workers do not get.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks.distributed_suites import train, workbench_config
from benchmarks.whole_runs import timed_process
from workbench.runtime.devices import device_tag

# Client threads by what they do (a local cluster's scheduler runs on the client's IO loop).
CLIENT_PARTS = {
    "MainThread": "client: step loop (dispatch, results, events, run store, progress)",
    "IO loop": "client: Dask IO loop (the local scheduler and the client's comms)",
    "dtrain-dashboard-publisher": "client: dashboard publisher",
}
WORKER_PARTS = {
    "Dask-Default-Threads": "worker: task thread (the steps: sampler, compute, update)",
    "allreduce": "worker: all-reduce thread",
    "MainThread": "worker: Dask event loop (task messages, heartbeats)",
}
TIMELINE_PARTS = {
    "busy": "devices' steps (first phase's start to last phase's end)",
    "gaps_in_task": "between steps of one task (per-step work outside the phases)",
    "gaps_between_tasks": "between tasks (a task's last step to the next task's first)",
}


def steady_state_ms(batch_size: int, seed: int) -> float:
    """ms per step of ``mirrored`` measured as ``bench ddp`` measures it (200 steps, the
    summary's steady state)."""
    config = workbench_config("mirrored", 2, "synthetic", (512, 512), batch_size, 200, 0.01, seed)
    return 1e3 * batch_size / train(config)["samples_per_second"]


def profiled(flags: Sequence[str], folder: Path, name: str) -> dict[str, Any]:
    """A profiled ``dtrain run FLAGS`` in its own process, with its wall time from outside."""
    out = folder / f"{name}.json"
    command = [sys.executable, "-m", "benchmarks.run_profile", str(out), *flags]
    seconds, _ = timed_process(command, folder)
    return {**json.loads(out.read_text()), "wall_seconds_outside": seconds}


def per_step_ms(short: dict[str, Any], long: dict[str, Any], steps: int) -> dict[str, float]:
    """The long profile minus the short one, in ms per step, by part."""

    def delta(read) -> float:
        return 1e3 * (read(long) - read(short)) / steps

    figures = {"end_to_end": delta(lambda p: p["wall_seconds_outside"])}
    for key in TIMELINE_PARTS:
        figures[f"timeline:{key}"] = delta(lambda p, key=key: p["timeline"].get(key, 0.0))
    on_timeline = sum(figures[f"timeline:{key}"] for key in TIMELINE_PARTS)
    figures["outside_timeline"] = figures["end_to_end"] - on_timeline
    figures["run_steady_state"] = (
        1e3 * long["summary"]["global_batch_size"] / (long["summary"]["samples_per_second"])
    )
    for thread in CLIENT_PARTS:
        figures[f"client:{thread}"] = delta(lambda p, t=thread: p["client_cpu"].get(t, 0.0))
    figures["client:(total)"] = delta(lambda p: p["client_cpu"]["(total)"])
    for thread in WORKER_PARTS:
        figures[f"worker:{thread}"] = delta(
            lambda p, t=thread: statistics.mean(w.get(t, 0.0) for w in p["worker_cpu"])
        )
    figures["worker:(total)"] = delta(
        lambda p: statistics.mean(w["(total)"] for w in p["worker_cpu"])
    )
    figures["nannies"] = delta(lambda p: p["other_processes_cpu"])
    return figures


def device_phases_per_step(
    short: dict[str, Any], long: dict[str, Any], steps: int
) -> dict[str, dict[str, float]]:
    """Each device's phases in the long profile minus the short one, in ms per step: where a
    family's step goes on each of its devices (a pipeline's stages, a parameter server's
    shards and workers)."""
    return {
        device: {
            phase: 1e3 * (seconds - short["device_phases"].get(device, {}).get(phase, 0.0)) / steps
            for phase, seconds in phases.items()
        }
        for device, phases in long["device_phases"].items()
    }


def render_device_phases(
    family: str, trial: dict[str, dict[str, float]], end_to_end: float
) -> list[str]:
    """Markdown lines: one row per device, ms per step in each kind of phase."""
    phases = sorted({phase for by_phase in trial.values() for phase in by_phase})
    phases = [p for p in phases if p != "outside phases"] + ["outside phases"]
    lines = [
        "",
        f"#### {family}: each device's step (profiled long run minus short run, ms per step; "
        f"end to end {end_to_end:.2f})",
        "",
        "| device | " + " | ".join(phases) + " |",
        "|---|" + "---:|" * len(phases),
    ]
    for device in sorted(trial):
        cells = " | ".join(f"{trial[device].get(phase, 0.0):.2f}" for phase in phases)
        lines.append(f"| {device_tag(device)} | {cells} |")
    return lines


def render_attribution(trials: list[dict[str, float]], steady_ms: list[float]) -> list[str]:
    """Markdown lines: ms per step by part, medians over trials."""

    def median(key: str) -> float:
        return statistics.median(trial[key] for trial in trials)

    steady = statistics.median(steady_ms)
    end_to_end = median("end_to_end")
    lines = [
        "",
        "#### Where the time goes (mirrored; profiled long run minus short run, per step; "
        f"medians over {len(trials)} trials)",
        "",
        "| part | ms per step |",
        "|---|---:|",
        f"| steady state as `bench ddp` measures it (run_training, 200 steps) | {steady:.2f} |",
        f"| end to end, profiled `dtrain run` (wall from outside) | {end_to_end:.2f} |",
        f"| - the long run's own steady state (its summary) | {median('run_steady_state'):.2f} |",
    ]
    lines += [
        f"| - devices: {label} | {median(f'timeline:{key}'):.2f} |"
        for key, label in TIMELINE_PARTS.items()
    ]
    lines.append(
        f"| - outside the devices' timeline (what scales with steps before the first or after "
        f"the last, and start-up variance) | {median('outside_timeline'):.2f} |"
    )
    medians = {key: median(key) for key in trials[0]}
    return lines + render_cpu(medians)


def render_cpu(figures: dict[str, float]) -> list[str]:
    """Markdown lines: CPU ms per step by part (the client's threads, the workers' mean)."""
    lines = ["", "| CPU by part | CPU ms per step |", "|---|---:|"]
    lines += [
        f"| {label} | {figures[f'client:{key}']:.2f} |" for key, label in CLIENT_PARTS.items()
    ]
    lines.append(f"| client process, all threads | {figures['client:(total)']:.2f} |")
    lines += [
        f"| {label} (mean of the workers) | {figures[f'worker:{key}']:.2f} |"
        for key, label in WORKER_PARTS.items()
    ]
    lines.append(f"| worker process, all threads (mean) | {figures['worker:(total)']:.2f} |")
    lines.append(f"| nannies | {figures['nannies']:.2f} |")
    return lines
