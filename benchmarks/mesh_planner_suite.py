"""The ``planner`` suite's mesh part (``python -m benchmarks planner --meshes``): the step the
planner predicts for a ``mesh`` run against the step the run measures, over meshes, schedules
and device counts, and whether the planner's ranking picks a configuration that is among the
fastest measured.

Every configuration trains the MLP 784-512-512-512-10 on ``synthetic`` (the reference MLP
with a third hidden layer: four Dense layers let ``pp=4`` give each stage a layer and
interleaved 1F1B give each of its 2 x 2 model chunks one), global batch 256, with
``run_training`` exactly as ``dtrain run --strategy mesh`` does: on 2 devices every mesh and
every pipeline schedule, on 4 devices data, tensor and pipeline parallelism alone and combined
(see :data:`CONFIGURATIONS`). As in the strategies' part (:mod:`benchmarks.planner_suite`),
each run calibrates afresh at its start in a run store of its own, its summary carries the
``predicted_step_ms`` simulated from that calibration before any step ran and the steady
``measured_step_ms``, and a configuration's figures are medians over ``repeats`` runs, the
configurations alternating so each sees the same machine.

Targets (docs/benchmarks.md, "Planner: mesh configurations"): predicted within 20% of measured
for at least 80% of the configurations; and, among the configurations of each device count
(what ``dtrain plan --what-if`` ranks for that many devices), the planner's top pick (the
lowest predicted step) among the two fastest measured.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from benchmarks.distributed_suites import own_run_store, spread
from benchmarks.flags import AddFlags, Run, settings_from
from benchmarks.report import median_span, table, verdict
from benchmarks.suite import Progress, Result
from workbench.config import RunConfig
from workbench.events import PhaseEvent
from workbench.events.summary import warmup_steps
from workbench.launch.runner import run_training

PART = "meshes"
CLOSE, SHARE_CLOSE, PICK_AMONG = 0.20, 0.80, 2
MODEL: dict[str, Any] = {"model": "mlp", "dataset": "synthetic", "hidden": (512, 512, 512)}
PIPELINE_MICROBATCHES = 4
# The measured phases by what they are (a tensor group's all-reduces and a data group's share
# the ``allreduce`` phase; a stage's hand-offs are its sends and receives).
PHASES = {
    "compute": "compute",
    "allreduce": "all-reduce",
    "send": "hand-offs",
    "recv": "hand-offs",
    "update": "update",
}


def _mesh(devices: int, mesh: str) -> dict[str, Any]:
    # One stage: no pipeline, one micro-batch (as the mesh search predicts it).
    return {"devices": devices, "mesh": mesh, "schedule": "1f1b", "microbatches": 1}


def _pipelined(devices: int, mesh: str, schedule: str) -> dict[str, Any]:
    configuration = {
        "devices": devices,
        "mesh": mesh,
        "schedule": schedule,
        "microbatches": PIPELINE_MICROBATCHES,
    }
    if schedule == "interleaved-1f1b":
        configuration["virtual_stages"] = 2
    return configuration


CONFIGURATIONS: tuple[dict[str, Any], ...] = (
    _mesh(2, "dp=2,tp=1,pp=1"),
    _mesh(2, "dp=1,tp=2,pp=1"),
    *(
        _pipelined(2, "dp=1,tp=1,pp=2", schedule)
        for schedule in ("gpipe", "1f1b", "interleaved-1f1b", "zero-bubble")
    ),
    _mesh(4, "dp=4,tp=1,pp=1"),
    _mesh(4, "dp=2,tp=2,pp=1"),
    _mesh(4, "dp=1,tp=4,pp=1"),
    *(
        _pipelined(4, "dp=2,tp=1,pp=2", schedule)
        for schedule in ("1f1b", "interleaved-1f1b", "zero-bubble")
    ),
    *(_pipelined(4, "dp=1,tp=2,pp=2", schedule) for schedule in ("gpipe", "1f1b", "zero-bubble")),
    *(_pipelined(4, "dp=1,tp=1,pp=4", schedule) for schedule in ("1f1b", "zero-bubble")),
)


@dataclass(frozen=True)
class MeshPlannerSettings:
    batch_size: int = 256
    steps: int = 300
    repeats: int = 3
    seed: int = 0


def label(configuration: Mapping[str, Any]) -> str:
    """``dp=1,tp=1,pp=2 1f1b M=4`` (the schedule only where there is a pipeline)."""
    if configuration["microbatches"] == 1 and configuration["mesh"].endswith("pp=1"):
        return configuration["mesh"]
    virtual = configuration.get("virtual_stages")
    shown = f" V={virtual}" if virtual else ""
    return (
        f"{configuration['mesh']} {configuration['schedule']} "
        f"M={configuration['microbatches']}{shown}"
    )


def run_config(settings: MeshPlannerSettings, configuration: Mapping[str, Any]) -> RunConfig:
    """The run of one configuration, as ``dtrain run --strategy mesh ...`` makes it."""
    return RunConfig(
        **MODEL,
        strategy="mesh",
        **configuration,
        batch_size=settings.batch_size,
        steps=settings.steps,
        seed=settings.seed,
        device_type="cpu",
    )


def _run(settings: MeshPlannerSettings, configuration: Mapping[str, Any]) -> dict[str, Any]:
    with own_run_store():
        result = run_training(run_config(settings, configuration), progress=lambda _: None)
    return {
        "predicted": result.summary["predicted_step_ms"],
        "measured": result.summary["measured_step_ms"],
        "phases": phases_ms(result.log.phases()),
    }


def phases_ms(events: Sequence[PhaseEvent]) -> dict[str, float]:
    """Milliseconds a device spends per steady step (warm-up excluded) in each kind of phase,
    the mean over devices: where the measured step went, beside the planner's parts."""
    steps = sorted({event.step for event in events})
    steady = set(steps[warmup_steps(len(steps)) :])
    devices = {event.device for event in events}
    totals = dict.fromkeys(PHASES.values(), 0.0)
    for event in events:
        if event.step in steady and str(event.phase) in PHASES:
            totals[PHASES[str(event.phase)]] += event.duration
    count = max(len(steady) * len(devices), 1)
    return {name: 1e3 * seconds / count for name, seconds in totals.items()}


def run_mesh_planner_suite(settings: MeshPlannerSettings, progress: Progress) -> Result:
    runs: dict[int, list[dict[str, Any]]] = {}
    for repeat in range(settings.repeats):
        for index, configuration in enumerate(CONFIGURATIONS):
            progress(
                f"{configuration['devices']} devices {label(configuration)}: "
                f"run {repeat + 1}/{settings.repeats}"
            )
            result = _run(settings, configuration)
            progress(
                f"  predicted {result['predicted']:.2f} ms, measured {result['measured']:.2f} ms"
            )
            runs.setdefault(index, []).append(result)
    return summarize(asdict(settings), CONFIGURATIONS, runs)


def summarize(
    settings: Mapping[str, Any],
    configurations: Sequence[Mapping[str, Any]],
    runs: Mapping[int, Sequence[Mapping[str, Any]]],
) -> Result:
    """The suite's result from each configuration's runs (``runs[index]``: the ``predicted``
    and ``measured`` step ms of each repeat, and where given its measured ``phases``): a row
    per configuration with its medians, error and ranks among its device count, the share
    within 20%, and each device count's ranking."""
    rows = []
    for index, results in sorted(runs.items()):
        predicted = spread([r["predicted"] for r in results])
        measured = spread([r["measured"] for r in results])
        error = predicted["median"] / measured["median"] - 1
        phases = [r["phases"] for r in results if "phases" in r]
        rows.append(
            {
                **configurations[index],
                "label": label(configurations[index]),
                "predicted_ms": predicted,
                "measured_ms": measured,
                "error": error,
                "within_close": abs(error) <= CLOSE,
                "phases_ms": {
                    name: statistics.median(p[name] for p in phases) for name in phases[0]
                }
                if phases
                else {},
            }
        )
    rankings = [_ranking(devices, rows) for devices in sorted({row["devices"] for row in rows})]
    # A label names its mesh, so its device count: unique across the rankings.
    rows = [
        {
            **row,
            "predicted_rank": _position(row["label"], rankings, "predicted_order"),
            "measured_rank": _position(row["label"], rankings, "measured_order"),
        }
        for row in rows
    ]
    share = sum(row["within_close"] for row in rows) / len(rows)
    share_met = share >= SHARE_CLOSE
    picks_met = all(ranking["met"] for ranking in rankings)
    return {
        "suite": "planner",
        "part": PART,
        "settings": dict(settings),
        "rows": rows,
        "share_within_close": share,
        "share_met": share_met,
        "rankings": rankings,
        "picks_met": picks_met,
        "met": share_met and picks_met,
    }


def _position(label: str, rankings: Sequence[Mapping[str, Any]], order: str) -> int:
    """Where ``label`` stands (from 1) in its device count's ``order``."""
    return next(r[order].index(label) + 1 for r in rankings if label in r[order])


def _ranking(devices: int, rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The planner's order of the configurations on ``devices`` devices (lowest predicted step
    first) beside the measured order, and whether its top pick is among the fastest measured."""
    group = [row for row in rows if row["devices"] == devices]
    predicted = [row["label"] for row in sorted(group, key=lambda r: r["predicted_ms"]["median"])]
    measured = [row["label"] for row in sorted(group, key=lambda r: r["measured_ms"]["median"])]
    pick = predicted[0]
    pick_rank = measured.index(pick) + 1
    return {
        "devices": devices,
        "predicted_order": predicted,
        "measured_order": measured,
        "pick": pick,
        "pick_measured_rank": pick_rank,
        "met": pick_rank <= PICK_AMONG,
    }


def with_meshes(add_flags: AddFlags, run: Run) -> tuple[AddFlags, Run]:
    """The planner suite's ``add_flags`` and ``run`` with ``--meshes``: run this part (with
    the suite's ``--train-steps``, ``--repeats`` and ``--seed``) instead of the strategies'."""

    def add_flags_and_meshes(parser: argparse.ArgumentParser) -> None:
        add_flags(parser)
        parser.add_argument(
            "--meshes",
            action="store_true",
            help="predicted vs measured step of mesh runs (dp x tp x pp, each pipeline "
            "schedule, 2 and 4 devices) and the planner's top pick, instead of the strategies",
        )

    def run_strategies_or_meshes(args: argparse.Namespace, progress: Progress) -> Result:
        if args.meshes:
            return run_mesh_planner_suite(settings_from(MeshPlannerSettings, args), progress)
        return run(args, progress)

    return add_flags_and_meshes, run_strategies_or_meshes


def is_meshes(result: Result) -> bool:
    """Whether ``result`` is this part's (the planner suite's render hands it here)."""
    return result.get("part") == PART


def render(result: Result) -> str:
    settings = result["settings"]
    rows = [
        (
            row["devices"],
            row["label"],
            f"{row['predicted_ms']['median']:.2f}",
            median_span(row["measured_ms"]),
            f"{row['error']:+.0%}" + ("" if row["within_close"] else " (>20%)"),
            row["predicted_rank"],
            row["measured_rank"],
        )
        for row in result["rows"]
    ]
    columns = (
        "devices",
        "mesh, schedule",
        "predicted ms",
        "measured ms (min - max)",
        "error",
        "planner's rank",
        "measured rank",
    )
    close = sum(row["within_close"] for row in result["rows"])
    lines = [
        f"### planner: mesh configurations, MLP 784-512-512-512-10 on synthetic, batch "
        f"{settings['batch_size']}, {settings['steps']} steps, median of {settings['repeats']} "
        "runs",
        "",
        *table(columns, "rlrrrrr", rows),
        "",
        f"- within 20%: {close} of {len(result['rows'])} configurations "
        f"({result['share_within_close']:.0%}; target 80%): {verdict(result['share_met'])}",
    ]
    for ranking in result["rankings"]:
        lines.append(
            f"- {ranking['devices']} devices: the planner's pick {ranking['pick']} is measured "
            f"#{ranking['pick_measured_rank']} of {len(ranking['measured_order'])} (target: "
            f"among the fastest {PICK_AMONG}): {verdict(ranking['met'])}; fastest measured "
            f"{ranking['measured_order'][0]}"
        )
    return "\n".join([*lines, *_phases_table(result["rows"])])


def _phases_table(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Where each measured step went (ms per device and step, the mean over devices)."""
    names = sorted({name for row in rows for name in row["phases_ms"]}, key=_PHASE_ORDER.index)
    if not names:
        return []
    cells = [
        (
            row["devices"],
            row["label"],
            f"{row['measured_ms']['median']:.2f}",
            *(f"{row['phases_ms'].get(name, 0.0):.2f}" for name in names),
        )
        for row in rows
    ]
    columns = ("devices", "mesh, schedule", "measured step ms", *(f"{n} ms" for n in names))
    return ["", *table(columns, "rl" + "r" * (len(names) + 1), cells)]


_PHASE_ORDER = list(dict.fromkeys(PHASES.values()))
