"""``python -m benchmarks``: run benchmark suites side by side with their peers and report them.

``python -m benchmarks SUITE [flags]`` runs one suite with the flags it declares (``python -m
benchmarks SUITE --help``), ``python -m benchmarks`` runs every suite with its defaults,
``python -m benchmarks --list`` names them. The report is Markdown (paste it into
docs/benchmarks.md as it is); ``--json`` prints one JSON object on stdout instead. Progress goes
to stderr. From a source checkout ``dtrain bench ...`` runs the same command.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Sequence
from typing import Any, cast

from benchmarks.suite import (
    Progress,
    Result,
    SettingsError,
    Suite,
    SuiteFailed,
    SuiteUnavailable,
)

PROG = "python -m benchmarks"

# Each suite's one-line summary, by name; its module is benchmarks/NAME_suite.py (a hyphen in
# NAME as an underscore), imported only
# when the suite runs or shows its help.
SUITES: dict[str, str] = {
    "step": "one SGD step of the MLP 784-512-512-10: workbench vs hand-written NumPy vs PyTorch",
    "ddp": "mirrored on 2 CPU devices vs PyTorch DDP (gloo), MLP 784-512-512-10, global batch 256",
    "e2e": "whole dtrain run commands vs a whole PyTorch DDP script, start-up cancelled out "
    "(wall(1100 steps) - wall(100)): what a user pays per step",
    "allreduce": "ring all-reduce of 64 MiB between Dask workers vs the bound from "
    "point-to-point B",
    "nccl": "NCCL all-reduce of 64 MiB between GPU workers, beside the GPUs' memory bandwidth",
    "overhead": "framework overhead per step on a tiny MLP: one-device and mirrored on 2 devices",
    "bubble": "measured pipeline bubble of each schedule (GPipe, 1F1B, interleaved, zero-bubble) "
    "vs its formula",
    "charts": "a run with live notebook charts vs the same run without: one-device and mirrored",
    "faults": "a killed worker's recovery (mirrored), backup workers and an async straggler (PS)",
    "planner": "the planner's predicted step vs the same run's measured step, every strategy, "
    "MLP and CNN",
    "hosts": "the planner's prediction across a rate-limited link: 2 emulated hosts x 2 workers "
    "(network namespaces, root), multi-worker-mirrored and a flat ring",
    "memory": "peak resident memory of the client and each worker of a CIFAR-10 run (mirrored, "
    "2 devices), this checkout beside --compare-with CHECKOUT",
    "calibration": "what calibrating at run start costs a first run: mirrored, digits, 10 "
    "epochs, calibrating vs --no-calibrate",
    "compression": "--compression none, fp16, bf16, topk:0.01, powersgd:2: accuracy and "
    "gradient bytes",
    "cli": "how fast dtrain --help, --version, a flag typo and %load_ext workbench answer",
    "latency": "seconds from starting a mirrored 2-device run to its record, cluster, data, "
    "first step and first chart point",
    "memory-plan": "predicted vs measured peak memory per device, every strategy and option",
    "placement": "model-parallel on 2 devices, --placement greedy vs balanced-params: MLP "
    "784-256-2048-2048-256-10, CNN",
}


def load(name: str) -> Suite:
    """The module of the suite ``name`` (a key of :data:`SUITES`)."""
    module = name.replace("-", "_")  # memory-plan: benchmarks/memory_plan_suite.py
    return cast(Suite, importlib.import_module(f"benchmarks.{module}_suite"))


def _json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")


def command_parser(prog: str = PROG) -> argparse.ArgumentParser:
    """The flags that come before a suite's name (or stand alone)."""
    parser = argparse.ArgumentParser(
        prog=prog,
        usage=f"{prog} [--list] [--json] [SUITE [SUITE's flags]]",
        description="Run benchmark suites side by side with their peers, on identical work. "
        f"With no SUITE, every suite runs with its defaults; '{prog} SUITE --help' lists a "
        "suite's flags.",
        epilog="suites: " + "; ".join(f"{name}: {summary}" for name, summary in SUITES.items()),
    )
    parser.add_argument("--list", action="store_true", help="name the suites and exit")
    _json_flag(parser)
    return parser


def suite_parser(name: str, prog: str = PROG) -> argparse.ArgumentParser:
    """The suite's own parser: ``--json`` and the flags the suite declares."""
    parser = argparse.ArgumentParser(prog=f"{prog} {name}", description=SUITES[name])
    _json_flag(parser)
    load(name).add_flags(parser)
    return parser


def _stderr(prefix: str) -> Progress:
    return lambda line: print(f"[bench {prefix}] {line}", file=sys.stderr, flush=True)


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace | int:
    try:
        return parser.parse_args(argv)
    except SystemExit as exit_:  # argparse exits on --help and on bad flags
        return exit_.code if isinstance(exit_.code, int) else 2


def bench_command(argv: list[str], prog: str = PROG) -> int:
    """Runs ``PROG ARGV``; returns the exit status.

    0: done; 1: a suite's contenders disagree (its timings would be meaningless); 2: bad flags
    or a missing device or package.

    Examples
    --------
    >>> bench_command(["--list"])  # doctest: +ELLIPSIS
    step  ...
    0
    """
    at = next((index for index, word in enumerate(argv) if not word.startswith("-")), len(argv))
    front = _parse(command_parser(prog), argv[:at])
    if isinstance(front, int):
        return front
    if front.list:
        for name, summary in SUITES.items():
            print(f"{name:<11} {summary}")
        return 0
    names = argv[at : at + 1] or list(SUITES)
    if names[0] not in SUITES:
        print(
            f"{prog}: error: unknown suite {names[0]!r}; choose from {', '.join(SUITES)} "
            f"({prog} --list)",
            file=sys.stderr,
        )
        return 2
    as_json = front.json
    results: dict[str, Result] = {}
    for name in names:
        args = _parse(suite_parser(name, prog), argv[at + 1 :])
        if isinstance(args, int):
            return args
        as_json = as_json or args.json
        status = _run(prog, name, args, results)
        if status:
            return status
    return _report(prog, argv, results, as_json)


def _run(prog: str, name: str, args: argparse.Namespace, results: dict[str, Result]) -> int:
    from workbench.runtime import DeviceError

    try:
        results[name] = load(name).run(args, _stderr(name))
    except (DeviceError, SettingsError, SuiteUnavailable) as error:
        print(f"{prog}: error: {error}", file=sys.stderr)
        return 2
    except SuiteFailed as error:
        print(f"{prog} {name}: FAILED: {error}", file=sys.stderr)
        return 1
    return 0


def _report(prog: str, argv: list[str], results: dict[str, Result], as_json: bool) -> int:
    from benchmarks.machine import describe_machine
    from benchmarks.report import whole_report

    machine = describe_machine()
    if as_json:
        report: dict[str, Any] = {
            "command": [*prog.split(), *argv],
            "machine": machine,
            "suites": results,
        }
        print(json.dumps(report, indent=2))
    else:
        print(whole_report(prog, machine, results, lambda name, r: load(name).render(r)))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return bench_command(list(sys.argv[1:] if argv is None else argv))
