"""Generated malformed flags, through ``dtrain run`` and ``%dtrain``: every one is refused
before anything starts (exit 2 with ``dtrain run: error:``, or a ``UsageError``), naming a flag
the input gave, in well under 10 s; never a traceback, never a run.

The cases are derived from the option rows themselves (every run option and every strategy's
option, by type: floats get NaN, infinities and overflowing literals; integers negative,
fractional and 64-bit-overflowing values; choices unknown, empty, binary and very long words),
plus hand-written hostile paths and cluster addresses, so a new option is fuzzed as soon as
it is declared.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import random
import shlex
import time

import pytest
from IPython.core.error import UsageError

from workbench.config import RUN_OPTIONS, Option
from workbench.launch.background_run import BackgroundRun
from workbench.strategies import STRATEGIES

# The module, not the package's ``main`` function of the same name.
cli_main = importlib.import_module("workbench.cli.main")
SECONDS_PER_CASE = 10.0
BAD_FLOATS = ("nan", "NaN", "inf", "-inf", "Infinity", "1e400", "-1e400", "abc", "", "1,5")
BAD_INTEGERS = ("1.5", "abc", "", "0x10", "99999999999999999999", "1e3", "-99999999999999999999")
BAD_WORDS = ("", "x" * 300, "\x00", "../etc/passwd", "ring;rm -rf /", "\u202eevil", "NONE ")
BAD_PATHS = {
    "save": ("/dev/null/checkpoint", "/proc/1/save", ""),
    "tensorboard": ("/dev/null/events", "/proc/1/events", ""),
    "resume": ("/dev/null", "/nonexistent/checkpoint", "/etc"),
    "scheduler_file": ("/dev/zero", "/etc", "/dev/null", "/proc/self/status"),
    "tls_ca_file": ("/nonexistent/ca.pem",),
    "tls_cert": ("/nonexistent/cert.pem",),
    "tls_key": ("/nonexistent/key.pem",),
    "dataset": (
        "mnist:/nonexistent",
        "npz:/dev/null",
        "cifar10:/etc/passwd",
        "synthetic:0:2:10",
        "synthetic:8:100000000000:10",
        "synthetic:8:2:100000000000",
        "synthetic:x",
        "imagenet",
        "",
    ),
    "cluster": (
        "inproc://127.0.0.1/1/1",
        "file:///tmp/scheduler",
        "http://127.0.0.1:8787",
        "tcp://127.0.0.1",
        "tcp://127.0.0.1:99999",
        "127.0.0.1:0",
        ":::",
    ),
    "hidden": ("0", "-5", "a,b", "", "512,,512", "1000000000", "99999999999999999999"),
    "simulate_straggler": ("task:1=nan", "task:1=inf", "task:1=0.5", "=3", "task:1"),
    "simulate_overflow": ("-1", "x", "1.5"),
}
# What each strategy needs besides its own option to pass the other rules.
STRATEGY_BASE = {
    "mirrored": ["--devices", "2"],
    "central-storage": ["--devices", "2"],
    "multi-worker-mirrored": ["--devices", "4"],
    "parameter-server": ["--devices", "2"],
    "pipeline": ["--devices", "2"],
    "hybrid": ["--devices", "4"],
    "model-parallel": ["--devices", "2"],
}


def _bad_values(option: Option) -> tuple[str, ...]:
    if option.name in BAD_PATHS:
        return BAD_PATHS[option.name]
    if option.type is float:
        low = () if option.minimum is None else (str(option.minimum - 1),)
        return BAD_FLOATS + low
    if option.type is int:
        low = () if option.minimum is None else (str(int(option.minimum) - 1),)
        return BAD_INTEGERS + low
    if option.choices is not None:
        return BAD_WORDS
    if option.name == "compression":
        return ("topk:nan", "topk:inf", "topk:0", "powersgd:0", "powersgd:1e9", "gzip", "")
    return ()


def _cases() -> list[list[str]]:
    cases = []
    for option in RUN_OPTIONS:
        if option.type is bool:
            cases.append([f"{option.flag}=yes"])  # a switch given a value
            continue
        base = ["--cluster", "tcp://127.0.0.1:1"] if option.name.startswith("tls") else []
        cases += [[*base, option.flag, value] for value in _bad_values(option)]
    for option in STRATEGIES.options().values():
        strategy = STRATEGIES.takers(option.name)[0]
        base = ["--strategy", strategy, *STRATEGY_BASE.get(strategy, [])]
        if option.type is bool:
            cases.append([*base, f"{option.flag}=yes"])
            continue
        cases += [[*base, option.flag, value] for value in _bad_values(option)]
    # Whole-line mistakes: unknown flags, missing values, options of another strategy.
    cases += [
        ["--no-such-flag"],
        ["--lr"],
        ["--devices"],
        ["--strategy", "mirrored", "--devices", "2", "--ps", "2"],
        ["--strategy", "one-device", "--allreduce", "ring"],
        [
            "--strategy",
            "mirrored",
            "--devices",
            "100000",
            "--batch-size",
            "100000",
            "--dataset",
            "synthetic:8:2:200000",
        ],
        ["--epochs", "2", "--steps", "2"],
    ]
    # Every case parses the flags alone; with the default one-device run, the rest is valid.
    return [[*case, "--steps", "1"] if "--steps" not in case else case for case in cases]


CASES = _cases()


def _flags_in(argv: list[str]) -> set[str]:
    flags = {word.split("=")[0] for word in argv if word.startswith("--")}
    return flags | {"--strategy", "--devices"}  # a strategy's rule may name its devices


@pytest.fixture
def nothing_starts(monkeypatch):
    """A case that passed every check would train: make that a test failure instead."""

    def refuse(*arguments, **keywords):
        raise AssertionError("the input passed validation and a run was about to start")

    monkeypatch.setattr(cli_main, "_train_recorded", refuse)
    monkeypatch.setattr(BackgroundRun, "begin", refuse)
    monkeypatch.setattr(BackgroundRun, "panel", refuse)


def test_there_are_enough_generated_cases():
    assert len(CASES) >= 150, len(CASES)


def test_every_malformed_flag_is_refused_by_dtrain_run_naming_it(nothing_starts):
    failures = []
    for argv in CASES:
        errors = io.StringIO()
        started = time.perf_counter()
        try:
            with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
                code = cli_main.main(["run", *argv])
        except Exception as error:  # a traceback the user would have seen
            failures.append(f"{shlex.join(argv)} -> {type(error).__name__}: {error}"[:300])
            continue
        seconds = time.perf_counter() - started
        message = errors.getvalue().strip()
        named = any(flag in message for flag in _flags_in(argv))
        if code != 2 or not message.startswith("dtrain run: error: ") or not named:
            failures.append(f"{shlex.join(argv)} -> exit {code}: {message[:300]}")
        elif seconds > SECONDS_PER_CASE:
            failures.append(f"{shlex.join(argv)} took {seconds:.1f} s")
        assert "Traceback" not in message, message
    assert not failures, f"{len(failures)} of the cases:\n" + "\n".join(failures)


def test_the_same_lines_raise_usage_errors_in_the_magic(shell, nothing_starts):
    sample = random.Random(29).sample(CASES, 60)
    failures = []
    for argv in sample:
        line = shlex.join(argv)
        try:
            shell.run_line_magic("dtrain", line)
        except UsageError as error:
            if not any(flag in str(error) for flag in _flags_in(argv)):
                failures.append(f"{line} -> {error}")
            continue
        except Exception as error:  # a traceback in the notebook
            failures.append(f"{line} -> {type(error).__name__}: {error}"[:300])
            continue
        failures.append(f"{line} -> no UsageError")
    assert not failures, f"{len(failures)} of the cases:\n" + "\n".join(failures)
