"""``dtrain bench``: run benchmark suites side by side with their peers and report them.

``dtrain bench step [flags]`` runs one suite, ``dtrain bench`` runs them all, ``dtrain bench
--list`` names them. The report is Markdown (paste it into a README as it is); ``--json``
prints one JSON object on stdout instead. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from workbench.bench import (
    allreduce_suite,
    bubble_suite,
    calibration_suite,
    charts_suite,
    cli_suite,
    compression_suite,
    ddp_suite,
    e2e_suite,
    faults_suite,
    hosts_suite,
    latency_suite,
    memory_suite,
    nccl_suite,
    overhead_suite,
    placement_suite,
    planner_suite,
)
from workbench.bench.machine import describe_machine, machine_lines
from workbench.bench.step_suite import AgreementError, StepSettings, run_step_suite
from workbench.runtime import DeviceError

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Suite:
    """A benchmark: ``run`` turns the parsed flags into a JSON-ready result, ``render`` turns
    that result into Markdown."""

    name: str
    summary: str
    run: Callable[[argparse.Namespace, Progress], dict[str, Any]]
    render: Callable[[dict[str, Any]], str]


def _run_step(args: argparse.Namespace, progress: Progress) -> dict[str, Any]:
    settings = StepSettings(
        batch_size=args.batch_size,
        hidden=args.hidden,
        threads=args.threads,
        device_type=args.device_type,
        rounds=args.rounds,
        steps_per_round=args.steps_per_round,
        warmup_steps=args.warmup,
        learning_rate=args.lr,
        seed=args.seed,
        isolation=args.isolation,
        allocator=args.allocator,
    )
    return run_step_suite(settings, progress)


def render_step(result: dict[str, Any]) -> str:
    """The suite's result as Markdown: a heading, the table, the ratios and the method."""
    settings, ratios = result["settings"], result["ratios"]
    threads = f"{settings['threads']} thread" + ("s" if settings["threads"] != 1 else "")
    lines = [
        f"### step: one SGD step of MLP {'-'.join(map(str, settings['layers']))}, batch "
        f"{settings['batch_size']}, {settings['dtype']}, {threads}, "
        f"{settings['device_type'].upper()}",
        "",
        "| contender | ms/step (median) | min - max | samples/s | GFLOP/s | page faults/step |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in result["contenders"].values():
        if not row["available"]:
            lines.append(f"| {row['label']} | {row['reason']} | | | | |")
            continue
        ms = row["ms_per_step"]
        lines.append(
            f"| {row['label']} | {ms['median']:.2f} | {ms['min']:.2f} - {ms['max']:.2f} | "
            f"{row['samples_per_second']:,.0f} | {row['gflops']:.1f} | "
            f"{row['page_faults_per_step']:,.0f} |"
        )
    over_numpy, over_torch = (
        ratios["workbench_over_numpy_step_time"],
        ratios["workbench_over_torch_throughput"],
    )
    verdict = {True: "met", False: "NOT met", None: "judged at the reference size only"}
    lines += [
        "",
        f"- workbench / NumPy step time: **{over_numpy['median']:.2f}** (per round "
        f"{over_numpy['min']:.2f} - {over_numpy['max']:.2f}; target <= "
        f"{over_numpy['target_max']:.2f}: {verdict[over_numpy['met']]})",
    ]
    if over_torch is not None:
        lines.append(
            f"- workbench / PyTorch throughput: **{over_torch['median']:.2f}** (per round "
            f"{over_torch['min']:.2f} - {over_torch['max']:.2f}; above 1 means faster)"
        )
    agreement = result["agreement"]
    worst = max(agreement["max_relative_update_difference"].values(), default=0.0)
    lines += [
        f"- agreement after one step from the same parameters: losses and parameters within "
        f"rtol {agreement['rtol']:g}, atol {agreement['atol']:g}; updates within "
        f"{worst:.1e} of their norm",
        f"- method: {settings['warmup_steps']} warm-up steps each, then {settings['rounds']} "
        f"rounds x {settings['steps_per_round']} steps of each contender, interleaved (order "
        "rotated every round); median and range over rounds",
        "- isolation: "
        + (
            "each contender in a worker process of its own"
            if settings["isolation"] == "process"
            else "all contenders in one process (sharing its allocator and thread pools)"
        )
        + "; malloc: "
        + (
            "glibc thresholds fixed (mmap 32 MiB, trim 256 MiB) in every process"
            if settings["allocator"] == "steady"
            else "glibc defaults (thresholds move with each process's history)"
        ),
    ]
    return "\n".join(lines)


SUITES: dict[str, Suite] = {
    "step": Suite(
        "step",
        "one SGD step of the MLP 784-512-512-10: workbench vs hand-written NumPy vs PyTorch",
        _run_step,
        render_step,
    ),
    "ddp": Suite(
        "ddp",
        "mirrored on 2 CPU devices vs PyTorch DDP (gloo), MLP 784-512-512-10, global batch 256",
        ddp_suite.run_from_args,
        ddp_suite.render,
    ),
    "e2e": Suite(
        "e2e",
        "whole dtrain run commands vs a whole PyTorch DDP script, start-up cancelled out "
        "(wall(1100 steps) - wall(100)): what a user pays per step",
        e2e_suite.run_from_args,
        e2e_suite.render,
    ),
    "allreduce": Suite(
        "allreduce",
        "ring all-reduce of 64 MiB between Dask workers vs the bound from point-to-point B",
        allreduce_suite.run_from_args,
        allreduce_suite.render,
    ),
    "nccl": Suite(
        "nccl",
        "NCCL all-reduce of 64 MiB between GPU workers, beside the GPUs' memory bandwidth",
        nccl_suite.run_from_args,
        nccl_suite.render,
    ),
    "overhead": Suite(
        "overhead",
        "framework overhead per step on a tiny MLP: one-device and mirrored on 2 devices",
        overhead_suite.run_from_args,
        overhead_suite.render,
    ),
    "bubble": Suite(
        "bubble",
        "measured pipeline bubble (GPipe, 1F1B) vs GPipe's (P-1)/(M+P-1)",
        bubble_suite.run_from_args,
        bubble_suite.render,
    ),
    "charts": Suite(
        "charts",
        "a run with live notebook charts vs the same run without: one-device and mirrored",
        charts_suite.run_from_args,
        charts_suite.render,
    ),
    "faults": Suite(
        "faults",
        "a killed worker's recovery (mirrored), backup workers and an async straggler (PS)",
        faults_suite.run_from_args,
        faults_suite.render,
    ),
    "planner": Suite(
        "planner",
        "the planner's predicted step vs the same run's measured step, every strategy, MLP and CNN",
        planner_suite.run_from_args,
        planner_suite.render,
    ),
    "hosts": Suite(
        "hosts",
        "the planner's prediction across a rate-limited link: 2 emulated hosts x 2 workers "
        "(network namespaces, root), multi-worker-mirrored and a flat ring",
        hosts_suite.run_from_args,
        hosts_suite.render,
    ),
    "memory": Suite(
        "memory",
        "peak resident memory of the client and each worker of a CIFAR-10 run (mirrored, 2 "
        "devices), this checkout beside --compare-with CHECKOUT",
        memory_suite.run_from_args,
        memory_suite.render,
    ),
    "calibration": Suite(
        "calibration",
        "what calibrating at run start costs a first run: mirrored, digits, 10 epochs, "
        "calibrating vs --no-calibrate",
        calibration_suite.run_from_args,
        calibration_suite.render,
    ),
    "compression": Suite(
        "compression",
        "--compression none, fp16, bf16, topk:0.01, powersgd:2: accuracy and gradient bytes",
        compression_suite.run_from_args,
        compression_suite.render,
    ),
    "cli": Suite(
        "cli",
        "how fast dtrain --help, --version, a flag typo and %load_ext workbench answer",
        cli_suite.run_from_args,
        cli_suite.render,
    ),
    "latency": Suite(
        "latency",
        "seconds from starting a mirrored 2-device run to its record, cluster, data, first "
        "step and first chart point",
        latency_suite.run_from_args,
        latency_suite.render,
    ),
    "placement": Suite(
        "placement",
        "model-parallel on 2 devices, --placement greedy vs balanced-params: MLP "
        "784-256-2048-2048-256-10, CNN",
        placement_suite.run_from_args,
        placement_suite.render,
    ),
}


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _planner_models(text: str) -> tuple[str, ...]:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in planner_suite.MODELS]
    if not names or unknown:
        raise argparse.ArgumentTypeError(
            f"expected models from {', '.join(planner_suite.MODELS)}, got {text!r}"
        )
    return names


def _non_negative(text: str) -> int:
    return 0 if text.strip() == "0" else _positive(text)


def _hidden(text: str) -> tuple[int, ...]:
    try:
        return tuple(_positive(part) for part in text.split(","))
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated positive integers like 512,512, got {text!r}"
        ) from None


def _models(text: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in text.split(","))
    if not names or any(name not in ("mlp", "cnn") for name in names):
        raise argparse.ArgumentTypeError(f"expected models from mlp,cnn, got {text!r}")
    return names


def _three_steps(text: str) -> tuple[int, int, int]:
    counts = _hidden(text)
    if len(counts) != 3:
        raise argparse.ArgumentTypeError(
            f"expected three step counts RECOVERY,BACKUP,ASYNC like 300,100,200, got {text!r}"
        )
    return counts


def _mebibytes(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive size in MiB, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dtrain bench",
        description="Run benchmark suites side by side with their peers, on identical work.",
        epilog="suites: " + "; ".join(f"{s.name}: {s.summary}" for s in SUITES.values()),
    )
    parser.add_argument("suites", nargs="*", metavar="SUITE", help="suites to run (all if none)")
    parser.add_argument("--list", action="store_true", help="name the suites and exit")
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    parser.add_argument("--device-type", choices=("cpu", "gpu"), default="cpu")
    parser.add_argument("--threads", type=_positive, default=1, help="BLAS/torch threads (1)")
    parser.add_argument("--rounds", type=_positive, default=15, help="timed rounds (15)")
    parser.add_argument(
        "--steps-per-round", type=_positive, default=10, help="steps per contender per round"
    )
    parser.add_argument(
        "--warmup", type=_non_negative, default=5, help="untimed steps per contender (5)"
    )
    parser.add_argument("--batch-size", type=_positive, default=256)
    parser.add_argument("--hidden", type=_hidden, default=(512, 512), help="e.g. 512,512")
    parser.add_argument("--lr", type=float, default=0.01, help="SGD learning rate (0.01)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--isolation",
        choices=("process", "none"),
        default="process",
        help="each contender in its own worker process (default), or all in this one",
    )
    parser.add_argument(
        "--allocator",
        choices=("steady", "default"),
        default="steady",
        help="fix glibc's malloc thresholds in every contender's process (default), or leave "
        "glibc's history-dependent defaults (then watch the page-faults column)",
    )
    distributed = parser.add_argument_group(
        "ddp, allreduce, nccl, overhead, bubble and charts suites"
    )
    distributed.add_argument(
        "--devices", type=_positive, default=2, help="ddp: data-parallel devices/processes (2)"
    )
    distributed.add_argument(
        "--train-steps",
        type=_positive,
        default=None,
        help="ddp, overhead, bubble, charts, placement: training steps per run (200, 400, 20, "
        "2000, 150); the first 10%% (at most 20) are warm-up",
    )
    distributed.add_argument(
        "--repeats",
        type=_positive,
        default=3,
        help="ddp, overhead, bubble, charts, faults, placement: runs each (3)",
    )
    distributed.add_argument(
        "--transfers", type=_positive, default=10, help="allreduce, nccl: timed repetitions (10)"
    )
    distributed.add_argument(
        "--allreduce-mib", type=_mebibytes, default=64.0, help="allreduce, nccl: tensor size (64)"
    )
    distributed.add_argument(
        "--allreduce-workers",
        type=_hidden,
        default=(2, 4),
        help="allreduce: e.g. 2,4 (nccl: the first)",
    )
    distributed.add_argument("--stages", type=_positive, default=None, help="bubble: stages (2)")
    distributed.add_argument(
        "--microbatches", type=_hidden, default=None, help="bubble: micro-batch counts (4,8)"
    )
    distributed.add_argument(
        "--bubble-hidden", type=_hidden, default=None, help="bubble: hidden layers (6 x 1024)"
    )
    distributed.add_argument(
        "--planner-models",
        type=_planner_models,
        default=None,
        help="planner: models to predict and run (mlp,cnn)",
    )
    distributed.add_argument(
        "--link-rate",
        default="1gbit",
        help="hosts: the emulated hosts' link rate, as tc writes it (1gbit, 200mbit)",
    )
    placement = parser.add_argument_group("placement suite (also --train-steps, --repeats, --seed)")
    placement.add_argument(
        "--placement-hidden",
        type=_hidden,
        default=None,
        help="placement: hidden layers (256,2048,2048,256)",
    )
    placement.add_argument(
        "--placement-batch",
        type=_positive,
        default=None,
        help="placement: global batch (MLP 512, CNN 256)",
    )
    placement.add_argument(
        "--placement-models",
        type=_models,
        default=("mlp", "cnn"),
        help="placement: which models, of mlp,cnn (both)",
    )
    faults = parser.add_argument_group("faults suite (also --hidden, --repeats, --seed)")
    faults.add_argument(
        "--fault-steps",
        type=_three_steps,
        default=None,
        metavar="RECOVERY,BACKUP,ASYNC",
        help="steps of the recovery, backup-worker and async-straggler runs (300,100,200)",
    )
    faults.add_argument(
        "--checkpoint-every",
        type=_positive,
        default=20,
        help="recovery run: steps between checkpoints (20)",
    )
    faults.add_argument(
        "--kill-at",
        type=_positive,
        default=None,
        help="recovery run: kill a worker once the loss passed this step (half the steps)",
    )
    whole = parser.add_argument_group("e2e suite (also --repeats: trials, --seed)")
    whole.add_argument(
        "--e2e-overheads",
        action="store_true",
        help="e2e: also parameter-server (sync, 1 shard) and pipeline (2 stages, 4 micro-"
        "batches) against one-device",
    )
    whole.add_argument(
        "--no-e2e-profile",
        action="store_true",
        help="e2e: skip the attribution of the gap between bench ddp's steady state and the "
        "end-to-end figure (a steady-state run and two profiled runs per trial)",
    )
    memory = parser.add_argument_group("memory suite (also --train-steps, --repeats, --seed)")
    memory.add_argument(
        "--compare-with",
        default=None,
        metavar="CHECKOUT",
        help="memory: another workbench checkout (its repository root, e.g. a git worktree "
        "of an earlier commit) to run beside this one",
    )
    compression = parser.add_argument_group("compression suite (also --hidden, --seed)")
    compression.add_argument(
        "--epochs", type=_positive, default=10, help="compression: epochs per run (10)"
    )
    return parser


def _stderr(prefix: str) -> Progress:
    return lambda line: print(f"[bench {prefix}] {line}", file=sys.stderr, flush=True)


def _render(machine: dict[str, Any], results: dict[str, dict[str, Any]]) -> str:
    parts = ["## dtrain bench", "", *machine_lines(machine)]
    for name, result in results.items():
        parts += ["", SUITES[name].render(result)]
    return "\n".join(parts)


def bench_command(argv: list[str]) -> int:
    """Entry point of ``dtrain bench ARGS``; returns the exit status.

    0: done; 1: a suite's contenders disagree (its timings would be meaningless); 2: bad flags
    or a missing device or package.

    Examples
    --------
    >>> bench_command(["--list"])  # doctest: +ELLIPSIS
    step  ...
    0
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # argparse exits on --help and on bad flags
        return exit_.code if isinstance(exit_.code, int) else 2
    if args.list:
        for suite in SUITES.values():
            print(f"{suite.name:<10} {suite.summary}")
        return 0
    unknown = [name for name in args.suites if name not in SUITES]
    if unknown:
        print(
            f"dtrain bench: error: unknown suite {unknown[0]!r}; choose from "
            f"{', '.join(SUITES)} (dtrain bench --list)",
            file=sys.stderr,
        )
        return 2
    results: dict[str, dict[str, Any]] = {}
    for name in args.suites or list(SUITES):
        try:
            results[name] = SUITES[name].run(args, _stderr(name))
        except (DeviceError, faults_suite.SettingsError) as error:
            print(f"dtrain bench: error: {error}", file=sys.stderr)
            return 2
        except (AgreementError, faults_suite.FaultNotInjected) as error:
            print(f"dtrain bench {name}: FAILED: {error}", file=sys.stderr)
            return 1
    machine = describe_machine()
    if args.json:
        report = {"command": ["dtrain", "bench", *argv], "machine": machine, "suites": results}
        print(json.dumps(report, indent=2))
    else:
        print(_render(machine, results))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return bench_command(list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
