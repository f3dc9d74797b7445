"""The ``e2e`` suite: what a user pays, measured from outside whole processes.

Each contender is a whole command a user runs: ``dtrain run`` (mirrored on 2 devices, the
reference MLP 784-512-512-10 on ``synthetic``, global batch 256, SGD, one thread per worker,
``--no-calibrate``) against a whole PyTorch DDP script doing the same steps
(:mod:`benchmarks.ddp_script`: 2 gloo processes). Every contender runs ``short`` and
``long`` steps (100 and 1100), and its throughput is ``(long - short) x batch / (wall(long) -
wall(short))``: starting the cluster or the process group, importing, building and tearing
down cancel out, and what remains is everything a step costs a user, dispatch, events, the
run store, the dashboard publisher and progress included. Trials alternate the contenders (the
order rotates every trial); medians and ranges over trials, ratios trial by trial.

With ``--e2e-overheads``, ``parameter-server`` (sync, 1 shard) and ``pipeline`` (2 stages, 4
micro-batches, GPipe and 1F1B) run the same way beside a ``one-device`` run of the same model,
and each pipeline beside its PyTorch peer: a whole ``torch.distributed.pipelining`` script
(:mod:`benchmarks.pipeline_script`: 2 gloo processes, the same split, schedule, micro-batches
and steps); ``parameter-server`` and its ``--mode async`` beside PyTorch's RPC parameter
server (:mod:`benchmarks.ps_script`: a server and 2 trainers, sync and async). Targets
(docs/benchmarks.md): each pipeline and the sync parameter server >= 1.2x its peer (median),
>= 1.0x in every trial; the pipelines >= 0.65 and the sync parameter server >= 0.6 of
one-device.

Every trial also attributes the difference between ``bench ddp``'s steady state and the
end-to-end figure (:mod:`benchmarks.e2e_attribution`): ``mirrored`` measured as ``bench
ddp`` measures it, and a profiled short and long ``dtrain run``.
"""

from __future__ import annotations

import json
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks.distributed_suites import spread
from benchmarks.e2e_attribution import (
    device_phases_per_step,
    per_step_ms,
    profiled,
    render_attribution,
    render_cpu,
    render_device_phases,
    steady_state_ms,
)
from benchmarks.flags import Flag, positive, settings_suite
from benchmarks.report import table
from benchmarks.suite import Progress
from benchmarks.whole_runs import dtrain_command, timed_process

MODEL_FLAGS = ("--model", "mlp", "--hidden", "512,512", "--dataset", "synthetic")
COMMON_FLAGS = ("--optimizer", "sgd", "--lr", "0.01", "--device-type", "cpu", "--no-calibrate")
STRATEGY_FLAGS = {
    "mirrored": ("--strategy", "mirrored", "--devices", "2"),
    "one-device": ("--strategy", "one-device"),
    "parameter-server": ("--strategy", "parameter-server", "--devices", "2", "--ps", "1"),
    "parameter-server-async": (
        *("--strategy", "parameter-server", "--devices", "2", "--ps", "1"),
        *("--mode", "async"),
    ),
    "pipeline": ("--strategy", "pipeline", "--devices", "2", "--stages", "2"),
    "pipeline-1f1b": ("--strategy", "pipeline", "--devices", "2", "--stages", "2"),
}
# The PyTorch pipelining peers (benchmarks/pipeline_script.py), by the workbench contender
# they are measured against: the same schedule, split and micro-batches.
TORCH_PIPELINES = {"torch-pipeline": "pipeline", "torch-pipeline-1f1b": "pipeline-1f1b"}
# The PyTorch RPC parameter servers (benchmarks/ps_script.py), by mode.
TORCH_PARAMETER_SERVERS = {"torch-ps": "sync", "torch-ps-async": "async"}
PIPELINE_MICROBATCHES = 4
PIPELINE_SCHEDULES = {"pipeline": "gpipe", "pipeline-1f1b": "1f1b"}
# (contender, the peer its throughput is divided by)
PAIRS = (
    ("mirrored", "ddp"),
    ("parameter-server", "one-device"),
    ("parameter-server", "torch-ps"),
    ("parameter-server-async", "torch-ps-async"),
    ("pipeline", "one-device"),
    ("pipeline-1f1b", "one-device"),
    ("pipeline", "torch-pipeline"),
    ("pipeline-1f1b", "torch-pipeline-1f1b"),
)


@dataclass(frozen=True)
class E2ESettings:
    short: int = 100
    long: int = 1100
    trials: int = 3
    batch_size: int = 256
    seed: int = 0
    overheads: bool = False
    profile: bool = True
    contenders: tuple[str, ...] = ()

    def chosen(self) -> tuple[str, ...]:
        if self.contenders:
            return self.contenders
        extra = (
            (
                *("one-device", "parameter-server", "parameter-server-async"),
                *TORCH_PARAMETER_SERVERS,
                *PIPELINE_SCHEDULES,
                *TORCH_PIPELINES,
            )
            if self.overheads
            else ()
        )
        return ("mirrored", "ddp", *extra)


def run_flags(contender: str, steps: int, settings: E2ESettings) -> list[str]:
    """The ``dtrain run`` flags of ``contender`` for ``steps`` steps."""
    flags = [*STRATEGY_FLAGS[contender], *MODEL_FLAGS, *COMMON_FLAGS]
    flags += ["--batch-size", str(settings.batch_size), "--steps", str(steps)]
    if contender in PIPELINE_SCHEDULES:
        flags += ["--microbatches", str(PIPELINE_MICROBATCHES)]
        flags += ["--schedule", PIPELINE_SCHEDULES[contender]]
    return [*flags, "--seed", str(settings.seed)]


def command(contender: str, steps: int, settings: E2ESettings) -> list[str]:
    """The whole command of ``contender`` for ``steps`` steps."""
    if contender == "ddp":
        script = ["-m", "benchmarks.ddp_script", "--steps", str(steps)]
        return [sys.executable, *script, "--batch-size", str(settings.batch_size)]
    if contender in TORCH_PARAMETER_SERVERS:
        script = ["-m", "benchmarks.ps_script", "--steps", str(steps)]
        mode = ["--mode", TORCH_PARAMETER_SERVERS[contender]]
        return [sys.executable, *script, *mode, "--batch-size", str(settings.batch_size)]
    if contender in TORCH_PIPELINES:
        schedule = PIPELINE_SCHEDULES[TORCH_PIPELINES[contender]]
        script = ["-m", "benchmarks.pipeline_script", "--steps", str(steps)]
        return [
            sys.executable,
            *script,
            "--schedule",
            schedule,
            "--microbatches",
            str(PIPELINE_MICROBATCHES),
            "--batch-size",
            str(settings.batch_size),
        ]
    return dtrain_command("run", *run_flags(contender, steps, settings), "--json")


def _attribute(settings: E2ESettings, folder: Path, progress: Progress) -> tuple[float, dict]:
    """One trial's attribution: (bench ddp's steady-state ms/step, the profile per step)."""
    steady = steady_state_ms(settings.batch_size, settings.seed)
    runs = {
        steps: profiled(run_flags("mirrored", steps, settings), folder, f"profile-{steps}")
        for steps in (settings.short, settings.long)
    }
    figures = per_step_ms(runs[settings.short], runs[settings.long], settings.long - settings.short)
    progress(
        f"  steady state {steady:.2f} ms/step; profiled end to end "
        f"{figures['end_to_end']:.2f} ms/step"
    )
    return steady, figures


# The families whose every device's step the first trial profiles (with --e2e-overheads).
PROFILED_FAMILIES = ("pipeline", "pipeline-1f1b", "parameter-server", "parameter-server-async")


def _profile_family(
    family: str, settings: E2ESettings, folder: Path, progress: Progress
) -> dict[str, Any]:
    """A family's profiled short and long runs: its CPU by part and each device's phases,
    per step."""
    runs = {
        steps: profiled(run_flags(family, steps, settings), folder, f"{family}-{steps}")
        for steps in (settings.short, settings.long)
    }
    steps = settings.long - settings.short
    figures = per_step_ms(runs[settings.short], runs[settings.long], steps)
    progress(f"  {family}: profiled end to end {figures['end_to_end']:.2f} ms/step")
    return {
        "figures": figures,
        "devices": device_phases_per_step(runs[settings.short], runs[settings.long], steps),
    }


def _final_loss(output: str) -> float:
    return float(json.loads(output)["final_loss"])


def run_e2e_suite(settings: E2ESettings, progress: Progress) -> dict[str, Any]:
    contenders = settings.chosen()
    walls: dict[str, dict[int, list[float]]] = {c: {} for c in contenders}
    throughput: dict[str, list[float]] = {c: [] for c in contenders}
    steady_ms: list[float] = []
    profiles: list[dict[str, float]] = []
    families: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="dtrain-e2e-") as name:
        folder = Path(name)
        for trial in range(settings.trials):
            order = contenders[trial % len(contenders) :] + contenders[: trial % len(contenders)]
            for contender in order:
                for steps in (settings.short, settings.long):
                    seconds, output = timed_process(command(contender, steps, settings), folder)
                    walls[contender].setdefault(steps, []).append(seconds)
                    progress(
                        f"trial {trial + 1}: {contender} {steps} steps in {seconds:.2f} s "
                        f"(final loss {_final_loss(output):.4f})"
                    )
                short, long = (
                    walls[contender][settings.short][-1],
                    walls[contender][settings.long][-1],
                )
                steps = settings.long - settings.short
                throughput[contender].append(steps * settings.batch_size / (long - short))
            if settings.profile and "mirrored" in contenders:
                progress(f"trial {trial + 1}: attribution (steady state, profiled runs)")
                steady, figures = _attribute(settings, folder, progress)
                steady_ms.append(steady)
                profiles.append(figures)
            if settings.profile and trial == 0:
                for family in (f for f in PROFILED_FAMILIES if f in contenders):
                    progress(f"trial 1: {family}'s profiled runs")
                    families[family] = _profile_family(family, settings, folder, progress)
    ratios = {}
    for contender, peer in PAIRS:
        if contender in throughput and peer in throughput:
            per_trial = [a / b for a, b in zip(throughput[contender], throughput[peer])]
            ratios[f"{contender}/{peer}"] = {**spread(per_trial), "per_trial": per_trial}
    return {
        "suite": "e2e",
        "settings": {**asdict(settings), "contenders": list(contenders)},
        "samples_per_second": {c: spread(values) for c, values in throughput.items()},
        "wall_seconds": {
            c: {str(steps): spread(values) for steps, values in by_steps.items()}
            for c, by_steps in walls.items()
        },
        "ratios": ratios,
        "attribution": {
            "steady_state_ms": steady_ms,
            "profiles": profiles,
            "families": families,
        },
    }


add_flags, run = settings_suite(
    E2ESettings,
    run_e2e_suite,
    ("seed",),
    trials=Flag(("--repeats", "--trials"), "trials, the contenders alternating", positive),
    overheads=Flag(
        ("--overheads", "--e2e-overheads"),
        "also parameter-server (sync and async, 1 shard) and pipeline (2 stages, 4 "
        "micro-batches, GPipe and 1F1B) against one-device and their PyTorch peers (RPC "
        "parameter server, torch.distributed.pipelining)",
        action="store_true",
    ),
    profile=Flag(
        ("--no-profile", "--no-e2e-profile"),
        "skip the attribution of the gap between bench ddp's steady state and the "
        "end-to-end figure (a steady-state run and two profiled runs per trial)",
        action="store_false",
    ),
)


def render(result: dict[str, Any]) -> str:
    settings = result["settings"]

    def _row(contender: str, figures: dict[str, float]) -> tuple[object, ...]:
        walls = result["wall_seconds"][contender]
        short, long = walls[str(settings["short"])], walls[str(settings["long"])]
        return (
            contender,
            f"{figures['median']:,.0f}",
            f"{figures['min']:,.0f} - {figures['max']:,.0f}",
            f"{short['median']:.1f} / {long['median']:.1f}",
        )

    span = settings["long"] - settings["short"]
    lines = [
        f"### e2e: whole commands, {span} steps timed as wall({settings['long']}) - "
        f"wall({settings['short']}), MLP 784-512-512-10 on synthetic, global batch "
        f"{settings['batch_size']}, {settings['trials']} trials alternating",
        "",
        *table(
            ("contender", "samples/s (median)", "min - max", "wall s, short / long (medians)"),
            "lrrr",
            map(_row, result["samples_per_second"], result["samples_per_second"].values()),
        ),
        "",
    ]
    for pair, ratio in result["ratios"].items():
        trials = ", ".join(f"{value:.2f}" for value in ratio["per_trial"])
        lines.append(f"- {pair}: **{ratio['median']:.2f}** (per trial {trials})")
    attribution = result["attribution"]
    if attribution["profiles"]:
        lines += render_attribution(attribution["profiles"], attribution["steady_state_ms"])
    for family, profile in attribution.get("families", {}).items():
        end_to_end = profile["figures"]["end_to_end"]
        lines += render_device_phases(family, profile["devices"], end_to_end)
        lines += render_cpu(profile["figures"])
    return "\n".join(lines)
