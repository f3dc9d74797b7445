"""The ``calibration`` suite: what calibrating at run start costs a short run.

A user's first run on a cluster calibrates before its first step; later runs read the cache.
Here every run is a first run (a run store of its own): ``mirrored`` on 2 devices, the digits
defaults, 10 epochs, as ``dtrain run`` runs it, alternately with calibration and with
``--no-calibrate``. Two figures: the calibration's own timer (its measuring, summed, over the
run's wall time) and the difference of the runs' median wall times (what calibrating adds to
a run, net of the first-use costs, imports and first touches, that a run pays either way).
Target: under 3% of the run's wall time.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from benchmarks.distributed_suites import own_run_store, spread
from benchmarks.flags import settings_suite
from benchmarks.report import span, table, verdict
from benchmarks.suite import Progress
from workbench.config import RunConfig
from workbench.launch.runner import run_training

SHARE = 0.03


@dataclass(frozen=True)
class CalibrationSettings:
    strategy: str = "mirrored"
    devices: int = 2
    epochs: int = 10
    repeats: int = 5
    seed: int = 0


def _run(settings: CalibrationSettings, calibrate: bool) -> dict[str, float]:
    config = RunConfig(
        strategy=settings.strategy,
        devices=settings.devices,
        epochs=settings.epochs,
        seed=settings.seed,
        no_calibrate=not calibrate,
        device_type="cpu",
    )
    with own_run_store():
        summary = run_training(config, progress=lambda line: None).summary
    return {"wall": summary["wall_seconds"], "measuring": summary.get("calibration_seconds", 0.0)}


def run_calibration_suite(settings: CalibrationSettings, progress: Progress) -> dict[str, Any]:
    runs: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    for index in range(settings.repeats):
        for calibrate in (True, False) if index % 2 == 0 else (False, True):
            label = "calibrating" if calibrate else "--no-calibrate"
            progress(f"repeat {index + 1}/{settings.repeats}: {label}")
            runs[calibrate].append(_run(settings, calibrate))
            progress(f"  {runs[calibrate][-1]['wall']:.3f} s")
    calibrated = spread([run["wall"] for run in runs[True]])
    uncalibrated = spread([run["wall"] for run in runs[False]])
    measuring = spread([run["measuring"] for run in runs[True]])
    own_share = measuring["median"] / calibrated["median"]
    added_share = (calibrated["median"] - uncalibrated["median"]) / uncalibrated["median"]
    return {
        "suite": "calibration",
        "settings": asdict(settings),
        "calibrated_wall_s": calibrated,
        "uncalibrated_wall_s": uncalibrated,
        "measuring_s": measuring,
        "own_share": own_share,
        "added_share": added_share,
        "met": own_share < SHARE,
    }


add_flags, run = settings_suite(CalibrationSettings, run_calibration_suite, ("repeats", "seed"))


def render(result: dict[str, Any]) -> str:
    settings = result["settings"]
    rows = [
        (label, f"{result[key]['median']:.3f}", span(result[key], 3))
        for label, key in (
            ("wall, calibrating (s)", "calibrated_wall_s"),
            ("wall, --no-calibrate (s)", "uncalibrated_wall_s"),
            ("calibration's own timer (s)", "measuring_s"),
        )
    ]
    return "\n".join(
        [
            f"### calibration: {settings['strategy']} on {settings['devices']} devices, digits, "
            f"{settings['epochs']} epochs, each run a first run, {settings['repeats']} of each, "
            "alternating",
            "",
            *table(("", "median", "min - max"), "lrr", rows),
            "",
            f"- calibration's own timer: {result['own_share']:.1%} of the run's wall time; "
            f"wall time added: {result['added_share']:+.1%} (target: under 3%): "
            f"{verdict(result['met'])} (on the timer)",
        ]
    )
