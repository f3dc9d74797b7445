"""The ``cli`` suite: how long the command line and ``%load_ext workbench`` take to answer.

Each contender runs in a fresh Python process, as a user starts it: ``dtrain --help``,
``dtrain --version``, a mistyped flag (``dtrain run --bad-flag``) and a mistyped strategy
(``dtrain run --strategy mirored``), timed from starting the process to its exit, the way
the ``dtrain`` script runs them (``from workbench.cli.main import main``). ``%load_ext
workbench`` is timed inside a fresh IPython shell, the magic alone (IPython's own start is not
the workbench's), once as in a terminal IPython and once as in a notebook (the shell has a
kernel, where charts need BokehJS). One untimed round first, then ``runs`` rounds, contenders
interleaved; the median and range over the rounds. Targets: 0.5 s for the commands, 1 s for
``%load_ext``.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

from benchmarks.flags import Flag, positive, settings_suite
from benchmarks.report import span, table
from benchmarks.suite import Progress

# (label, dtrain's arguments, the exit status it must end with)
COMMANDS: tuple[tuple[str, tuple[str, ...], int], ...] = (
    ("dtrain --help", ("--help",), 0),
    ("dtrain --version", ("--version",), 0),
    ("dtrain run --bad-flag", ("run", "--bad-flag"), 2),
    ("dtrain run --strategy mirored", ("run", "--strategy", "mirored"), 2),
)
COMMAND_TARGET_SECONDS = 0.5
LOAD_EXT_TARGET_SECONDS = 1.0
_DTRAIN = "import sys; from workbench.cli.main import main; sys.exit(main())"
# Prints how long %load_ext took; argv[1] "kernel" gives the shell a kernel, as a notebook's has.
_LOAD_EXT = """
import sys, time
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
if sys.argv[1] == "kernel":
    shell.kernel = object()
began = time.perf_counter()
shell.run_line_magic("load_ext", "workbench")
print(f"load_ext_seconds={time.perf_counter() - began}")
"""


@dataclass(frozen=True)
class CliSettings:
    runs: int = 5


def _time_command(arguments: tuple[str, ...]) -> tuple[float, int]:
    """Seconds from start to exit, and the exit status."""
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", _DTRAIN, *arguments], capture_output=True, text=True, check=False
    )
    return time.perf_counter() - began, done.returncode


def _time_load_ext(shell: str) -> tuple[float, int]:
    done = subprocess.run(
        [sys.executable, "-c", _LOAD_EXT, shell], capture_output=True, text=True, check=False
    )
    for line in done.stdout.splitlines():
        if line.startswith("load_ext_seconds="):
            return float(line.partition("=")[2]), done.returncode
    raise RuntimeError(f"%load_ext workbench failed: {done.stderr.strip()[-500:]}")


def run_cli_suite(settings: CliSettings, progress: Progress) -> dict[str, Any]:
    # label -> (measure, target seconds, the exit status it should end with)
    contenders = {
        label: (lambda a=arguments: _time_command(a), COMMAND_TARGET_SECONDS, status)
        for label, arguments, status in COMMANDS
    }
    for shell in ("terminal", "kernel"):
        label = f"%load_ext workbench ({'notebook kernel' if shell == 'kernel' else 'IPython'})"
        contenders[label] = (lambda s=shell: _time_load_ext(s), LOAD_EXT_TARGET_SECONDS, 0)
    seconds: dict[str, list[float]] = {label: [] for label in contenders}
    statuses: dict[str, int] = {}
    for index in range(settings.runs + 1):  # round 0 warms the file cache, untimed
        progress(f"round {index}/{settings.runs}" + (" (untimed)" if index == 0 else ""))
        for label, (measure, _, _) in contenders.items():
            value, statuses[label] = measure()
            if index:
                seconds[label].append(value)
    rows = []
    for label, (_, target, status) in contenders.items():
        median = statistics.median(seconds[label])
        rows.append(
            {
                "label": label,
                "seconds": {
                    "median": median,
                    "min": min(seconds[label]),
                    "max": max(seconds[label]),
                },
                "target_seconds": target,
                "met": median < target,
                "exit_status": statuses[label],
                "expected_exit_status": status,
            }
        )
    return {
        "settings": {**asdict(settings), "python": sys.executable, "cwd": os.getcwd()},
        "rows": rows,
    }


add_flags, run = settings_suite(
    CliSettings,
    run_cli_suite,
    runs=Flag(("--runs",), "timed rounds, each a fresh process per contender", positive),
)


def render(result: dict[str, Any]) -> str:
    rows = []
    for row in result["rows"]:
        wrong = row["exit_status"] != row["expected_exit_status"]
        note = f" (exit {row['exit_status']}, expected {row['expected_exit_status']})"
        rows.append(
            (
                f"{row['label']}{note if wrong else ''}",
                f"**{row['seconds']['median']:.3f}**",
                span(row["seconds"], 3),
                f"< {row['target_seconds']:g}",
                "yes" if row["met"] else "NO",
            )
        )
    columns = ("command", "median s", "min - max s", "target s", "met")
    return "\n".join(
        [
            f"### cli: time to answer, median of {result['settings']['runs']} fresh processes",
            "",
            *table(columns, "lrrrl", rows),
            "",
            "- method: each command a fresh `python -c` running dtrain's entry point, timed "
            "from start to exit; `%load_ext workbench` timed inside a fresh IPython shell "
            "(without and with a kernel); one untimed round, then the rounds interleaved",
        ]
    )
