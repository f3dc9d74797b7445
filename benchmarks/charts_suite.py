"""The ``charts`` suite: what live charts cost a run, against the same run without them.

A notebook run trains in a background thread of the kernel (``BackgroundRun``) while the live
panel's charts refresh from the event log at most 10 times a second in another thread of the
same process. With charts on, each run here gets exactly that: :class:`LiveCharts` inside a
``jupyter_bokeh.BokehModel`` (outside a kernel its comm drops the messages, but every change is
still turned into the JSON patch a browser would receive) and a :class:`LiveUpdater`. With
charts off, the same run with no one reading its events. Runs alternate on/off; throughput is
the summary's steady-state samples/s. Target: charts on within 5% of off. The charts are built
before training starts, as ``%dtrain`` does (building them takes about 0.3 s, which a short run
would otherwise count).
"""

from __future__ import annotations

import tempfile
from dataclasses import asdict, dataclass
from typing import Any

from benchmarks.distributed_suites import spread
from benchmarks.flags import settings_suite
from benchmarks.report import table, verdict, widths
from benchmarks.suite import Progress

TARGET_MIN_RATIO = 0.95
STRATEGIES = {"one-device": 1, "mirrored": 2}


@dataclass(frozen=True)
class ChartsSettings:
    dataset: str = "digits"
    hidden: tuple[int, ...] = (512, 512)
    batch_size: int = 64
    steps: int = 2000
    repeats: int = 3
    seed: int = 0


def _one_run(config, charts: bool, store_root: str) -> dict[str, Any]:
    from jupyter_bokeh.widgets import BokehModel

    from workbench.charts.live_charts import LiveCharts, LiveUpdater
    from workbench.launch.background_run import BackgroundRun
    from workbench.store import RunStore

    run = BackgroundRun(config, store=RunStore(store_root), begin=False)
    updater = None
    if charts:  # built before training starts, as %dtrain does
        live = LiveCharts(run.log, config.batch_size)
        model = BokehModel(live.layout)  # serialises every change, as in a notebook
        updater = LiveUpdater(live.refresh, lambda: run.done)
    run.begin().wait()
    summary = run.summary
    if summary is None:
        raise RuntimeError(f"the run ended without a summary: {run.error}")
    refreshes = 0
    if updater is not None:
        updater.join()
        refreshes = updater.refreshes
        del model
    return {
        "samples_per_second": summary["samples_per_second"],
        "wall_seconds": summary["wall_seconds"],
        "refreshes": refreshes,
        "events": len(run.events),
    }


def run_charts_suite(settings: ChartsSettings, progress: Progress) -> dict[str, Any]:
    from benchmarks.timing import limited_threads
    from workbench.config import RunConfig

    rows = []
    # One BLAS thread, as in every benchmark process: two spinning BLAS threads on two cores
    # made the in-process one-device run vary tenfold with whatever else ran.
    with (
        tempfile.TemporaryDirectory(prefix="dtrain-bench-charts-") as store_root,
        limited_threads(1),
    ):
        for strategy, devices in STRATEGIES.items():
            config = RunConfig(
                strategy=strategy,
                devices=devices,
                dataset=settings.dataset,
                hidden=settings.hidden,
                batch_size=settings.batch_size,
                steps=settings.steps,
                optimizer="sgd",
                lr_decay="none",
                seed=settings.seed,
            )
            runs: dict[str, list[dict[str, Any]]] = {"off": [], "on": []}
            for index in range(settings.repeats):
                order = ("off", "on") if index % 2 == 0 else ("on", "off")
                for mode in order:
                    progress(f"{strategy}: repeat {index + 1}/{settings.repeats}, charts {mode}")
                    runs[mode].append(_one_run(config, mode == "on", store_root))
                    progress(f"  {runs[mode][-1]['samples_per_second']:,.0f} samples/s")
            off = spread([r["samples_per_second"] for r in runs["off"]])
            on = spread([r["samples_per_second"] for r in runs["on"]])
            ratio = on["median"] / off["median"]
            rows.append(
                {
                    "strategy": strategy,
                    "devices": devices,
                    "off_samples_per_second": off,
                    "on_samples_per_second": on,
                    "on_over_off": ratio,
                    "refreshes_per_second": spread(
                        [r["refreshes"] / r["wall_seconds"] for r in runs["on"]]
                    ),
                    "events_per_run": runs["on"][0]["events"],
                    "target_min_ratio": TARGET_MIN_RATIO,
                    "met": ratio >= TARGET_MIN_RATIO,
                    "runs": runs,
                }
            )
    return {"suite": "charts", "settings": asdict(settings), "rows": rows}


add_flags, run = settings_suite(ChartsSettings, run_charts_suite, ("steps", "repeats", "seed"))


def render(result: dict[str, Any]) -> str:
    settings = result["settings"]
    rows = [
        (
            f"{row['strategy']} ({row['devices']} device{'s' if row['devices'] > 1 else ''})",
            f"{row['off_samples_per_second']['median']:,.0f}",
            f"{row['on_samples_per_second']['median']:,.0f}",
            f"**{row['on_over_off']:.3f}**",
            f"{row['refreshes_per_second']['median']:.1f}",
            f"{row['events_per_run']:,}",
        )
        for row in result["rows"]
    ]
    columns = ("strategy", "charts off samples/s", "charts on samples/s", "on / off")
    lines = [
        f"### charts: live charts on vs off, MLP {widths(settings['hidden'])} on "
        f"{settings['dataset']}, batch {settings['batch_size']}, {settings['steps']} steps",
        "",
        *table((*columns, "refreshes/s", "events per run"), "lrrrrr", rows),
        "",
    ]
    for row in result["rows"]:
        lines.append(
            f"- {row['strategy']}: charts on at {row['on_over_off']:.1%} of off's throughput "
            f"(target >= {row['target_min_ratio']:.0%}: {verdict(row['met'])})"
        )
    lines.append(
        f"- method: {settings['repeats']} runs each, on and off alternating; a run is a "
        "BackgroundRun in this process (as in a notebook kernel); samples/s = the summary's "
        "steady state; one BLAS thread; charts on = LiveCharts in a BokehModel refreshed by a "
        "LiveUpdater"
    )
    return "\n".join(lines)
