"""The ``planner`` suite: the step the planner predicts against the step the run measures.

Every configuration the issue of record names (one-device; mirrored with each all-reduce;
central storage; parameter servers, sync, 1 and 2 shards; model parallel; pipeline, GPipe and
1F1B; all but one-device on 2 devices), and hybrid (2 replicas x 2 stages, on 4 devices),
trains the reference MLP (784-512-512-10 on
``synthetic``) and the CNN on ``digits``, global batch 256, with ``run_training`` exactly as
``dtrain run`` does. Each run calibrates afresh at its start, as the first run on a cluster
does (each has a run store of its own, so nothing is cached): its prediction and its
measurement see the machine as it was then (a shared machine's speed drifts by 10-20% over
minutes, which a calibration cached from an earlier run would turn into error). Its summary
carries both figures: ``predicted_step_ms``, simulated from that calibration before any step
ran, and ``measured_step_ms``, the steady-state step (warm-up excluded). A configuration's
figures are medians over ``repeats`` runs, the configurations alternating so each sees the same
machine, and its error is the median of its runs' errors (each run's prediction against its
own measurement). Targets: within 15% for at least 80% of the configurations, within 30% for
all. A second table times the planner itself on described clusters (the what-if table of the
reference MLP on 1 to 512 DGX-H100 hosts), and the mesh search alone on 1,024 devices with the
transformer preset (target: under 10 s; docs/guide/planning.md, "Searching the mesh").
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any

from benchmarks import mesh_planner_suite
from benchmarks.distributed_suites import own_run_store, spread
from benchmarks.flags import Flag, names_from, positive_list, settings_suite
from benchmarks.report import median_span, table, verdict
from benchmarks.suite import Progress
from workbench.config import RunConfig
from workbench.launch.runner import run_training
from workbench.models import build_model, transformer
from workbench.optim import make_optimizer
from workbench.planner.device_costs import described_costs
from workbench.planner.what_if import mesh_rows, rank_rows, what_if
from workbench.simulate import PRESETS

CLOSE, FAR, SHARE_CLOSE = 0.15, 0.30, 0.80
MODELS: dict[str, dict[str, Any]] = {
    "mlp": {"model": "mlp", "dataset": "synthetic", "hidden": (512, 512)},
    "cnn": {"model": "cnn", "dataset": "digits"},
}
CONFIGURATIONS: tuple[dict[str, Any], ...] = (
    {"strategy": "one-device"},
    {"strategy": "mirrored", "devices": 2, "allreduce": "ring"},
    {"strategy": "mirrored", "devices": 2, "allreduce": "hierarchical-copy"},
    {"strategy": "mirrored", "devices": 2, "allreduce": "reduce-to-one"},
    {"strategy": "central-storage", "devices": 2},
    {"strategy": "parameter-server", "devices": 2, "ps": 1},
    {"strategy": "parameter-server", "devices": 2, "ps": 2},
    {"strategy": "model-parallel", "devices": 2},
    {"strategy": "pipeline", "devices": 2, "schedule": "gpipe"},
    {"strategy": "pipeline", "devices": 2, "schedule": "1f1b"},
    # data x pipeline: 2 replicas x 2 stages (four workers share the machine's cores)
    {"strategy": "hybrid", "devices": 4, "stages": 2, "schedule": "1f1b"},
)
SCALE_HOSTS = (1, 8, 64, 512)
# The mesh search's timing row: 1,024 described GPUs, the transformer preset on digits' shape.
MESH_SEARCH_HOSTS, MESH_SEARCH_BATCH, MESH_SEARCH_SECONDS = 128, 8192, 10.0


@dataclass(frozen=True)
class PlannerSettings:
    models: tuple[str, ...] = ("mlp", "cnn")
    batch_size: int = 256
    steps: int = 300
    repeats: int = 3
    seed: int = 0
    # Described DGX-H100 hosts the what-if table is timed on (8 devices each).
    scale_hosts: tuple[int, ...] = SCALE_HOSTS


def _label(configuration: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in configuration.items() if k != "strategy")


def _run(settings: PlannerSettings, model: str, configuration: dict) -> dict[str, float]:
    config = RunConfig(
        **MODELS[model],
        **configuration,
        batch_size=settings.batch_size,
        steps=settings.steps,
        seed=settings.seed,
        device_type="cpu",
    )
    with own_run_store():
        summary = run_training(config, progress=lambda line: None).summary
    return {"predicted": summary["predicted_step_ms"], "measured": summary["measured_step_ms"]}


def run_planner_suite(settings: PlannerSettings, progress: Progress) -> dict[str, Any]:
    runs: dict[tuple[str, int], list[dict[str, float]]] = {}
    for repeat in range(settings.repeats):
        for model in settings.models:
            for index, configuration in enumerate(CONFIGURATIONS):
                progress(
                    f"{model} {configuration['strategy']} {_label(configuration)}: "
                    f"run {repeat + 1}/{settings.repeats}"
                )
                result = _run(settings, model, configuration)
                progress(
                    f"  predicted {result['predicted']:.2f} ms, measured "
                    f"{result['measured']:.2f} ms"
                )
                runs.setdefault((model, index), []).append(result)
    rows = []
    for (model, index), results in runs.items():
        # Each run's prediction against its own measurement: both saw the machine as it was
        # during that run (the medians of the two columns may come from different runs).
        errors = [r["predicted"] / r["measured"] - 1 for r in results]
        error = statistics.median(errors)
        rows.append(
            {
                "model": model,
                **CONFIGURATIONS[index],
                "predicted_ms": spread([r["predicted"] for r in results]),
                "measured_ms": spread([r["measured"] for r in results]),
                "errors": errors,
                "error": error,
                "within_close": abs(error) <= CLOSE,
                "within_far": abs(error) <= FAR,
            }
        )
    close = sum(row["within_close"] for row in rows) / len(rows)
    return {
        "suite": "planner",
        "settings": asdict(settings),
        "rows": rows,
        "share_within_close": close,
        "met": close >= SHARE_CLOSE and all(row["within_far"] for row in rows),
        "scale": _time_the_planner(settings.batch_size, settings.scale_hosts),
        "mesh_search": _time_the_mesh_search(),
    }


def _time_the_planner(per_device_batch: int, scale_hosts: tuple[int, ...]) -> list[dict[str, Any]]:
    """Seconds the what-if table takes on described DGX-H100 clusters of ``scale_hosts``
    hosts."""
    model = build_model("mlp", (784,), 10, (512, 512))
    rows = []
    for hosts in scale_hosts:
        cluster = PRESETS["dgx-h100"].with_hosts(hosts)
        started = time.perf_counter()
        table = what_if(
            RunConfig(batch_size=per_device_batch * cluster.size),
            model,
            make_optimizer("momentum"),
            described_costs(cluster),
            cluster.size,
            cluster.devices,
            cluster.device.memory_capacity_bytes,
        )
        seconds = time.perf_counter() - started
        best = next(row for row in table if row.reason == "fastest")
        rows.append(
            {
                "devices": cluster.size,
                "seconds": seconds,
                "configurations": sum(row.prediction is not None for row in table),
                "fastest": f"{best.strategy} {_label(best.options)}",
            }
        )
    return rows


def _time_the_mesh_search() -> dict[str, Any]:
    """Seconds the mesh search's rows take, ranked, on a described 1,024-GPU cluster."""
    cluster = PRESETS["dgx-h100"].with_hosts(MESH_SEARCH_HOSTS)
    config = RunConfig(model="transformer", dataset="digits", batch_size=MESH_SEARCH_BATCH)
    model = transformer((1, 8, 8), 10)
    started = time.perf_counter()
    costs = described_costs(cluster)
    ranked = rank_rows(
        mesh_rows(config, model, make_optimizer("momentum"), costs, cluster.size, cluster.devices)
    )
    seconds = time.perf_counter() - started
    best = ranked[0]
    return {
        "devices": cluster.size,
        "seconds": seconds,
        "configurations": len(ranked),
        "fastest": f"{best.strategy} {_label(best.options)}",
        "met": seconds < MESH_SEARCH_SECONDS,
    }


add_flags, run = settings_suite(
    PlannerSettings,
    run_planner_suite,
    ("steps", "repeats", "seed"),
    models=Flag(("--models", "--planner-models"), "models to predict and run", names_from(MODELS)),
    scale_hosts=Flag(
        ("--scale-hosts",),
        "described DGX-H100 hosts (8 GPUs each) the what-if table is timed on",
        positive_list,
    ),
)
# --meshes: the mesh configurations instead (benchmarks/mesh_planner_suite.py).
add_flags, run = mesh_planner_suite.with_meshes(add_flags, run)


def _options(row: dict[str, Any]) -> str:
    keys = ("devices", "allreduce", "ps", "stages", "schedule")
    return " ".join(f"{key}={row[key]}" for key in keys if key in row)


def render(result: dict[str, Any]) -> str:
    if mesh_planner_suite.is_meshes(result):
        return mesh_planner_suite.render(result)
    settings = result["settings"]
    rows = []
    for row in result["rows"]:
        mark = "" if row["within_close"] else (" (>15%)" if row["within_far"] else " (>30%)")
        rows.append(
            (
                row["model"],
                row["strategy"],
                _options(row),
                f"{row['predicted_ms']['median']:.2f}",
                median_span(row["measured_ms"]),
                f"{row['error']:+.0%}{mark}",
            )
        )
    scale = [
        (
            f"{row['devices'] // 8} hosts",
            row["devices"],
            row["configurations"],
            f"{row['seconds']:.2f}",
            row["fastest"],
        )
        for row in result["scale"]
    ]
    columns = ("model", "strategy", "options", "predicted ms", "measured ms (min - max)", "error")
    described = ("described cluster (DGX-H100)", "devices", "configurations", "planner seconds")
    return "\n".join(
        [
            f"### planner: predicted vs measured step, batch {settings['batch_size']}, "
            f"{settings['steps']} steps, median of {settings['repeats']} runs",
            "",
            *table(columns, "lllrrr", rows),
            "",
            "- error: the median over the runs of each run's prediction against its own "
            "measurement",
            f"- within 15%: {result['share_within_close']:.0%} of the configurations (target "
            f"80%, and all within 30%): {verdict(result['met'])}",
            "",
            *table((*described, "fastest"), "lrrrl", scale),
            "",
            _mesh_search_line(result["mesh_search"]),
        ]
    )


def _mesh_search_line(row: dict[str, Any]) -> str:
    return (
        f"- mesh search, transformer preset, {row['devices']} described DGX-H100 GPUs: "
        f"{row['configurations']} configurations ranked in {row['seconds']:.2f} s (target "
        f"under {MESH_SEARCH_SECONDS:.0f} s): {verdict(row['met'])}; fastest {row['fastest']}"
    )
