"""``python -m benchmarks``: one parser per suite with only that suite's flags, a suite's module
imported only when it is asked for, and ``dtrain bench`` forwarding there from a source checkout
while an installed wheel, which has no suites, says where they are.

Nothing here runs a suite: parsing, importing and the package's own files only.
"""

from __future__ import annotations

import dataclasses
import importlib.machinery
import re
import sys
from pathlib import Path

import pytest

from benchmarks import command
from benchmarks.command import SUITES, bench_command, load, suite_parser
from benchmarks.flags import settings_from
from benchmarks.report import table
from workbench.cli import bench_command as dtrain_bench
from workbench.cli.main import main as dtrain

ROOT = Path(__file__).resolve().parents[2]


def _suite_modules() -> list[str]:
    return [name for name in sys.modules if re.fullmatch(r"benchmarks\.\w+_suite", name)]


def test_only_the_suite_asked_for_is_imported(monkeypatch, capsys):
    for name in _suite_modules():
        monkeypatch.delitem(sys.modules, name)
    assert bench_command(["--list"]) == 0
    assert "placement" in capsys.readouterr().out
    assert _suite_modules() == []
    assert bench_command(["cli", "--help"]) == 0
    assert "--runs" in capsys.readouterr().out
    assert _suite_modules() == ["benchmarks.cli_suite"]


def test_each_suite_takes_only_its_own_flags(capsys):
    assert bench_command(["cli", "--repeats", "2"]) == 2
    assert "unrecognized arguments: --repeats" in capsys.readouterr().err
    assert bench_command(["step", "--link-rate", "1gbit"]) == 2
    assert suite_parser("hosts").parse_args(["--link-rate", "200mbit"]).rate == "200mbit"


@pytest.mark.parametrize("name", list(SUITES))
def test_every_suite_has_the_suite_shape_and_default_flags(name):
    suite = load(name)
    assert all(callable(getattr(suite, part, None)) for part in ("add_flags", "run", "render"))
    args = suite_parser(name).parse_args([])
    assert args.json is False
    # Where the flags are the fields of the suite's settings, no flag means the defaults.
    for settings_type in vars(suite).values():
        if (
            dataclasses.is_dataclass(settings_type)
            and isinstance(settings_type, type)
            and settings_type.__name__.endswith("Settings")
            and settings_type.__module__ == suite.__name__
        ):
            assert settings_from(settings_type, args) == settings_type()


def test_a_machine_that_cannot_run_a_suite_gets_exit_2_naming_why(monkeypatch, capsys):
    from benchmarks import emulated_hosts

    monkeypatch.setattr(emulated_hosts, "why_hosts_cannot_be_emulated", lambda: "needs root")
    assert bench_command(["hosts", "--repeats", "1"]) == 2
    assert "python -m benchmarks: error: needs root" in capsys.readouterr().err


def test_renamed_flags_keep_their_former_spelling():
    parser = suite_parser("bubble")
    assert parser.parse_args(["--bubble-hidden", "32,32"]).hidden == (32, 32)
    assert parser.parse_args(["--hidden", "8"]).hidden == (8,)
    assert suite_parser("allreduce").parse_args(["--allreduce-mib", "2"]).megabytes == 2.0
    e2e = suite_parser("e2e").parse_args(["--no-e2e-profile", "--e2e-overheads"])
    assert (e2e.profile, e2e.overheads) == (False, True)


def test_tables_keep_the_report_layout():
    assert table(("a", "b"), "lr", [("x", ""), ("y", 2)]) == [
        "| a | b |",
        "|---|---:|",
        "| x | |",
        "| y | 2 |",
    ]


def test_dtrain_bench_forwards_from_a_source_checkout(capsys):
    assert dtrain(["bench", "--list"]) == 0
    assert set(SUITES) <= {line.split()[0] for line in capsys.readouterr().out.splitlines()}
    assert dtrain(["bench", "nonsense"]) == 2
    assert "dtrain bench: error: unknown suite 'nonsense'" in capsys.readouterr().err


@pytest.mark.parametrize("found", [None, "/elsewhere/site-packages/benchmarks/__init__.py"])
def test_dtrain_bench_without_the_suites_says_where_they_are(monkeypatch, capsys, found):
    """An installed wheel has no ``benchmarks`` beside ``workbench``; another package of that
    name elsewhere is not the suites either."""
    spec = (
        None if found is None else importlib.machinery.ModuleSpec("benchmarks", None, origin=found)
    )
    monkeypatch.setattr(dtrain_bench, "find_spec", lambda name: spec)
    monkeypatch.setattr(command, "bench_command", lambda *a, **k: pytest.fail("forwarded"))
    assert dtrain(["bench", "--list"]) == 2
    error = capsys.readouterr().err
    assert "ship with the source repository" in error and "python -m benchmarks" in error


def test_the_wheel_holds_the_workbench_package_only():
    wheel = re.search(
        r"^\[tool\.hatch\.build\.targets\.wheel\]\n(.*?)^\[",
        (ROOT / "pyproject.toml").read_text(),
        re.MULTILINE | re.DOTALL,
    )
    assert wheel is not None and wheel[1].strip() == 'packages = ["workbench"]'
    assert not (ROOT / "workbench" / "bench").exists()
    # No module of the package runs root-only network tools or git.
    tooling = re.compile(r"""\[\s*["'](ip|tc|git|nsenter|unshare)["']|netns|worktree""")
    users = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "workbench").rglob("*.py")
        if tooling.search(path.read_text(encoding="utf-8"))
    ]
    assert users == []
