"""The ``latency`` suite: how soon a user sees a run they just started.

A trial starts a background run as ``%dtrain --strategy mirrored --devices 2`` does
(``BackgroundRun``, then ``begin``) and notes, from that call, when each milestone is reached:

- ``listed``: the run's record is in the run store (what the JupyterLab sidebar lists);
- ``prepared``: the configuration checked, the data set loaded and the model built;
- ``cluster``: the local cluster is up, its workers' devices probed;
- ``data``: the data set is held on the workers;
- ``calibrated``: the devices are calibrated (read from the cache after the first trial);
- ``first_step``: the first step began on a device (its setup done);
- ``first_point``: the first loss is in the run's event log (the first chart point).

Each trial runs in a fresh Python process, as a notebook's first run does (its imports done
before the clock starts, as ``%load_ext workbench`` did them), and the trials share one fresh
run store, so the first one calibrates and the others read its cache, as a user's later runs
do. The figures are the median and range over the trials.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

from benchmarks.flags import settings_suite
from benchmarks.report import span, table
from benchmarks.suite import Progress

MILESTONES: dict[str, str] = {
    "listed": "listed in the run store (the sidebar)",
    "prepared": "prepared (data set loaded, model built)",
    "cluster": "local cluster up",
    "data": "data set held on the workers",
    "calibrated": "devices calibrated",
    "first_step": "first step began on a device",
    "first_point": "first loss in the event log (first chart point)",
}
TRIAL_TIMEOUT_S = 600
# Runs one trial in a fresh interpreter and prints its milestones as the last line.
_TRIAL = "import sys; from benchmarks.latency_suite import trial_main; trial_main(sys.argv[1])"


@dataclass(frozen=True)
class LatencySettings:
    strategy: str = "mirrored"
    devices: int = 2
    dataset: str = "digits"
    steps: int = 40
    hidden: tuple[int, ...] | None = None  # None: the model's default, as %dtrain's
    repeats: int = 3
    seed: int = 0
    fresh_process: bool = True  # False: trials in this process (a quick check)


def measure_trial(settings: LatencySettings) -> dict[str, float | None]:
    """One run started in the background; seconds from the start to each milestone (None
    for one the run did not reach, e.g. ``calibrated`` with nothing to calibrate)."""
    from workbench.config import RunConfig
    from workbench.events.records import PhaseEvent, ScalarEvent
    from workbench.launch.background_run import BackgroundRun
    from workbench.store import RunStore

    options: dict[str, Any] = {"hidden": settings.hidden} if settings.hidden else {}
    config = RunConfig(
        strategy=settings.strategy,
        devices=settings.devices,
        dataset=settings.dataset,
        steps=settings.steps,
        seed=settings.seed,
        **options,
    )
    seen: dict[str, float] = {}
    lock = threading.Lock()

    def note(milestone: str) -> None:
        with lock:
            seen.setdefault(milestone, time.time())

    def progress(line: str) -> None:
        if "Dask dashboard:" in line:
            note("cluster")
        elif line.startswith("[data]"):
            note("data")
        elif line.startswith("[calibrate]") and "first_point" not in seen:
            seen["calibrated"] = time.time()  # the last calibration line before any step

    first_step: list[float] = []

    def watch(event) -> None:
        if isinstance(event, ScalarEvent) and event.name == "loss":
            note("first_point")
        elif isinstance(event, PhaseEvent) and not first_step:
            first_step.append(event.start)

    began = time.time()
    run = BackgroundRun(config, progress=progress, begin=False)
    note("prepared")
    run.log.subscribe(watch)
    run.begin()
    run.wait()
    status = RunStore().open(run.run_id).status()
    seen["listed"] = float(status["started"])
    if first_step:  # the devices' times are seconds since the job's clock origin
        seen["first_step"] = run.job.clock_origin + min(first_step)
    return {name: (seen[name] - began if name in seen else None) for name in MILESTONES}


def trial_main(settings_json: str) -> None:
    """A trial in this (fresh) process: its milestones as one JSON line on stdout."""
    settings = LatencySettings(**json.loads(settings_json))
    print(json.dumps(measure_trial(settings)), flush=True)


def _trial_in_process(settings: LatencySettings, store: str) -> dict[str, float | None]:
    settings_json = json.dumps(asdict(settings))
    done = subprocess.run(
        [sys.executable, "-c", _TRIAL, settings_json],
        env={**os.environ, "DTRAIN_RUN_STORE": store},
        capture_output=True,
        text=True,
        timeout=TRIAL_TIMEOUT_S,
        check=False,
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"a latency trial failed: {done.stderr.strip()[-800:]}")
    return json.loads(lines[-1])


def _spread(values: list[float | None]) -> dict[str, float] | None:
    reached = [value for value in values if value is not None]
    if not reached:
        return None
    return {"median": statistics.median(reached), "min": min(reached), "max": max(reached)}


def run_latency_suite(settings: LatencySettings, progress: Progress) -> dict[str, Any]:
    store = tempfile.mkdtemp(prefix="dtrain-bench-latency-")
    trials: list[dict[str, float | None]] = []
    previous = os.environ.get("DTRAIN_RUN_STORE")
    try:
        for index in range(settings.repeats):
            progress(f"trial {index + 1}/{settings.repeats}")
            if settings.fresh_process:
                trials.append(_trial_in_process(settings, store))
            else:
                os.environ["DTRAIN_RUN_STORE"] = store
                trials.append(measure_trial(settings))
    finally:
        if previous is None:
            os.environ.pop("DTRAIN_RUN_STORE", None)
        else:
            os.environ["DTRAIN_RUN_STORE"] = previous
        shutil.rmtree(store, ignore_errors=True)
    seconds = {name: _spread([t.get(name) for t in trials]) for name in MILESTONES}
    return {"settings": asdict(settings), "trials": trials, "seconds": seconds}


add_flags, run = settings_suite(
    LatencySettings, run_latency_suite, ("devices", "steps", "repeats", "seed")
)


def render(result: dict[str, Any]) -> str:
    settings = result["settings"]
    rows = [
        (label, "not reached", "")
        if spread is None
        else (label, f"{spread['median']:.2f}", span(spread))
        for label, spread in (
            (label, result["seconds"][name]) for name, label in MILESTONES.items()
        )
    ]
    return "\n".join(
        [
            f"### latency: {settings['strategy']} on {settings['devices']} devices, "
            f"{settings['dataset']}, {settings['steps']} steps; seconds from starting the run "
            f"(BackgroundRun, as %dtrain) to each milestone, {settings['repeats']} trials, each "
            "in a fresh process",
            "",
            *table(("milestone", "median (s)", "min - max (s)"), "lrr", rows),
        ]
    )
