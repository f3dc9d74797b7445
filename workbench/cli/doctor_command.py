"""``dtrain doctor``: the flags in, the report out (a table, or one JSON object with ``--json``).

What flows in: the command's arguments. What flows out: the report of
:func:`workbench.launch.doctor.run_doctor` on stdout, its progress on stderr, and the exit
status: 0 when every check and smoke run passed, 1 when one failed, 2 on a bad flag (named,
with its allowed values, before anything starts).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from workbench.config import ConfigError, RunConfig, check_run_options
from workbench.launch.doctor import DoctorReport, DoctorRequest, SmokeRun, run_doctor
from workbench.launch.errors import USER_ERRORS
from workbench.launch.runner import check_scheduler_reachable, stderr_progress
from workbench.runtime.cluster import ClusterError
from workbench.runtime.cluster_target import ClusterTarget
from workbench.strategies import STRATEGIES

PROG = "dtrain doctor"


class _DoctorParser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would print and exit; the command reports it
        if message.startswith("unrecognized arguments:"):
            flag = message.split(":", 1)[1].split()[0]
            raise ConfigError(flag, f"unknown flag; see {PROG} --help")
        if message.startswith("argument "):
            flag, _, detail = message[len("argument ") :].partition(": ")
            raise ConfigError(flag.split("/")[0], detail)
        raise ConfigError("flags", f"{message}; see {PROG} --help")


def build_parser() -> argparse.ArgumentParser:
    parser = _DoctorParser(
        prog=PROG,
        allow_abbrev=False,
        description="Report what this machine (and each worker) has, and smoke-run every "
        "strategy on the devices found.",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    parser.add_argument("--cluster", help="address of a Dask scheduler whose workers to check")
    parser.add_argument("--scheduler-file", help="a Dask scheduler file naming that cluster")
    parser.add_argument(
        "--devices",
        type=int,
        default=2,
        help="devices of each distributed smoke run; parameter-server adds a ps [default: 2]",
    )
    parser.add_argument("--device-type", default="auto", help="auto | cpu | gpu [default: auto]")
    parser.add_argument(
        "--share-gpu",
        action="store_true",
        help="let several devices compute on one GPU (set by itself when GPUs are too few)",
    )
    parser.add_argument("--skip-runs", action="store_true", help="report only; train nothing")
    strategies = ",".join(STRATEGIES.names())
    parser.add_argument("--strategies", help=f"comma-separated [default: {strategies}]")
    return parser


def parse_doctor_flags(argv: Sequence[str]) -> tuple[DoctorRequest, bool]:
    """The checked request the flags make, and whether to print JSON."""
    values = vars(build_parser().parse_args(list(argv)))
    as_json = values.pop("json")
    names = values.pop("strategies") or ""
    strategies = tuple(name.strip() for name in names.split(",") if name.strip())
    request = DoctorRequest(**values, strategies=strategies)
    check_request(request)
    return request, as_json


def check_request(request: DoctorRequest) -> None:
    """Raise :class:`ConfigError` naming the flag and its allowed values, before anything
    starts: the rules ``dtrain run`` applies to the same flags, then the strategy names."""
    config = RunConfig(
        devices=request.devices,
        device_type=request.device_type,
        share_gpu=request.share_gpu,
        cluster=request.cluster,
        scheduler_file=request.scheduler_file,
    )
    check_run_options(config)
    for name in request.strategies:
        if name not in STRATEGIES.names():
            raise ConfigError(
                "--strategies",
                f"unknown strategy {name!r}; choose from: {', '.join(STRATEGIES.names())}",
            )
    if request.cluster is not None:
        check_scheduler_reachable(ClusterTarget.of(config))


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Columns padded to their widest cell."""
    widths = [max(len(row[column]) for row in [header, *rows]) for column in range(len(header))]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)) for row in rows]
    header_line = "  ".join(cell.ljust(width) for cell, width in zip(header, widths))
    return "\n".join(line.rstrip() for line in [header_line, *lines])


def _devices(run: SmokeRun) -> str:
    extra = run.cluster_devices - run.devices  # a parameter server's shards
    return f"{run.devices}{f'+{extra}' if extra > 0 else ''} {run.device_type}"


def _parameters(run: SmokeRun) -> str:
    if run.parameters_match is None:
        return "reference" if run.strategy == "one-device" and run.status == "pass" else "-"
    verdict = "match" if run.parameters_match else "DIFFER"
    return f"{verdict} ({run.largest_difference:.0e})"


def format_report(report: DoctorReport) -> str:
    checks = format_table(
        ("check", "value", "status", "note"),
        [(row.check, row.value, row.status, row.note) for row in report.rows],
    )
    runs = format_table(
        ("run", "devices", "status", "seconds", "final loss", "parameters", "reason / note"),
        [
            (
                run.label,
                _devices(run),
                run.status,
                "-" if run.seconds is None else f"{run.seconds:.2f}",
                "-" if run.final_loss is None else f"{run.final_loss:.6f}",
                _parameters(run),
                run.reason or run.note,
            )
            for run in report.runs
        ],
    )
    verdict = "every check passed" if report.ok else "a check or a smoke run FAILED"
    return "\n\n".join([checks, *([runs] if report.runs else []), f"{PROG}: {verdict}"])


def doctor_command(argv: Sequence[str]) -> int:
    try:
        request, as_json = parse_doctor_flags(argv)
        report = run_doctor(request, stderr_progress)
    except (*USER_ERRORS, ClusterError) as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(report.to_dict(), indent=2, default=str) if as_json else format_report(report))
    return 0 if report.ok else 1
