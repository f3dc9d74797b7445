"""The ``overhead`` suite: what the framework costs per step when the model costs nothing.

A tiny MLP (16 features, one hidden layer of 8, 2 classes, batch 8) computes in a few tens of
microseconds, so a step's time is almost all framework: the graph interpreter, the step
loop, for ``mirrored`` the Dask task dispatch (one task per device per 20 steps) and the
all-reduce's RPC round trips. Each strategy trains ``steps`` steps with ``run_training``; the
step time is the global batch over the summary's steady-state samples/s, the compute time the
mean ``compute`` phase of the event log (per device and steady step), and overhead = step time
- compute time.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from benchmarks.distributed_suites import Trainer, spread, workbench_config
from benchmarks.flags import settings_suite
from benchmarks.report import span, table, widths
from benchmarks.suite import Progress

STRATEGIES = {"one_device": ("one-device", 1), "mirrored": ("mirrored", 2)}
LABELS = {"one_device": "workbench one-device", "mirrored": "workbench mirrored, 2 devices"}


@dataclass(frozen=True)
class OverheadSettings:
    dataset: str = "synthetic:16:2:1024"
    hidden: tuple[int, ...] = (8,)
    batch_size: int = 8
    steps: int = 400
    repeats: int = 3
    learning_rate: float = 0.01
    seed: int = 0


def run_overhead_suite(settings: OverheadSettings, progress: Progress) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in STRATEGIES}
    with Trainer(threads=1) as trainer:
        for index in range(settings.repeats):
            order = list(STRATEGIES) if index % 2 == 0 else list(reversed(STRATEGIES))
            for name in order:
                strategy, devices = STRATEGIES[name]
                progress(f"repeat {index + 1}/{settings.repeats}: {LABELS[name]}")
                config = workbench_config(
                    strategy,
                    devices,
                    settings.dataset,
                    settings.hidden,
                    settings.batch_size,
                    settings.steps,
                    settings.learning_rate,
                    settings.seed,
                )
                runs[name].append(trainer(config))
                progress(f"  {runs[name][-1]['phases_ms']['step']:.3f} ms/step")
    contenders = {}
    for name, label in LABELS.items():
        phases = [run["phases_ms"] for run in runs[name]]
        contenders[name] = {
            "label": label,
            "devices": STRATEGIES[name][1],
            "ms_per_step": spread([p["step"] for p in phases]),
            "compute_ms": spread([p["compute"] for p in phases]),
            "overhead_ms": spread([p["step"] - p["compute"] for p in phases]),
            "phases_ms": {
                phase: spread([p[phase] for p in phases])["median"] for phase in phases[0]
            },
            "samples_per_second": spread([run["samples_per_second"] for run in runs[name]]),
            "runs": runs[name],
        }
    return {
        "suite": "overhead",
        "settings": {**asdict(settings), "dtype": "float32", "optimizer": "sgd"},
        "contenders": contenders,
    }


add_flags, run = settings_suite(OverheadSettings, run_overhead_suite, ("steps", "repeats", "seed"))


def render(result: dict[str, Any]) -> str:
    settings = result["settings"]
    rows = [
        (
            row["label"],
            f"{row['ms_per_step']['median']:.3f}",
            span(row["ms_per_step"], 3),
            f"{row['compute_ms']['median']:.3f}",
            f"**{row['overhead_ms']['median']:.3f}**",
            *(f"{row['phases_ms'][phase]:.3f}" for phase in ("allreduce", "update", "other")),
        )
        for row in result["contenders"].values()
    ]
    columns = ("strategy", "ms/step (median)", "min - max", "compute ms", "overhead ms")
    return "\n".join(
        [
            f"### overhead: framework cost per step, MLP on {settings['dataset']} with hidden "
            f"{widths(settings['hidden'])}, batch {settings['batch_size']}, float32",
            "",
            *table((*columns, "all-reduce ms", "update ms", "other ms"), "lrrrrrrr", rows),
            "",
            f"- method: {settings['repeats']} runs of {settings['steps']} steps per strategy, "
            "alternating; step time = global batch / steady-state samples/s (warm-up excluded); "
            "compute, all-reduce (exposed: after compute), update = mean phase durations from "
            "the event log (one-device's compute phase is the whole step: forward, backward and "
            "update); overhead = step - compute; other = step - compute - all-reduce - update "
            "(task dispatch, step loop)",
        ]
    )
