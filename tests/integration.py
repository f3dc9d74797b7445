"""The ``integration`` marker: which tests start a Dask cluster, a subprocess, a Jupyter server,
a kernel or a browser, and the guard that keeps the quick loop (``pytest -m "not
integration"``, docs/guide/setup.md) free of them.

Most tests carry the marker in their own module (``pytestmark`` or a decorator). The ones
marked here are those whose fixtures start something, doctests, and modules this rule
covers without editing them."""

from __future__ import annotations

import multiprocessing.process
import re
import subprocess
from collections.abc import Callable, Iterable
from typing import Any, NoReturn

import pytest

MARKER = "integration"

# Fixtures that start a Jupyter server, a process as another user, or a process to kill.
FIXTURES = frozenset({"jp_serverapp", "other_user", "full_disk", "processes", "dead_pid"})

# Doctests whose examples start a process or a cluster.
DOCTESTS = frozenset(
    {
        "workbench",
        "benchmarks.ddp_reference.run_ddp",
        "benchmarks.machine.describe_machine",
        "workbench.calibration.run_start.cached_local_calibration",
    }
)

# Modules that run a tool in a subprocess (the docs build, mypy).
MODULES = frozenset({"tests/docs/test_docs_build.py", "tests/typecheck/test_types.py"})


def starts_something(item: pytest.Item) -> bool:
    """Whether ``item`` is known to start something from its fixtures, doctest or module."""
    if FIXTURES & set(getattr(item, "fixturenames", ())):
        return True
    if isinstance(item, pytest.DoctestItem) and item.name in DOCTESTS:
        return True
    return item.nodeid.split("::")[0] in MODULES


def mark(items: Iterable[pytest.Item]) -> None:
    """Adds the marker to every item :func:`starts_something` names (pytest's own way of
    marking from a hook: ``add_marker``)."""
    for item in items:
        if starts_something(item):
            item.add_marker(MARKER)


def leaves_out(markexpr: str) -> bool:
    """Whether the ``-m`` expression ``markexpr`` leaves the integration tests out."""
    return re.search(rf"\bnot\s+{MARKER}\b", markexpr or "") is not None


def refusal(what: str) -> Callable[..., NoReturn]:
    """A stand-in for ``what`` that fails the test, saying how to mark it."""

    def refuse(*_args: Any, **_kwargs: Any) -> NoReturn:
        pytest.fail(
            f"this test starts {what}, but is not marked @pytest.mark.{MARKER}: mark it "
            f"(or its module: pytestmark = pytest.mark.{MARKER}) so the quick loop leaves it out",
            pytrace=True,
        )

    return refuse


def guard(monkeypatch: pytest.MonkeyPatch) -> None:
    """Makes every start of a process, cluster, scheduler, worker or client fail the test."""
    import distributed
    from distributed.deploy.spec import SpecCluster

    monkeypatch.setattr(subprocess.Popen, "__init__", refusal("a subprocess"))
    monkeypatch.setattr(multiprocessing.process.BaseProcess, "start", refusal("a process"))
    monkeypatch.setattr(SpecCluster, "__init__", refusal("a Dask cluster"))
    for name in ("Client", "Scheduler", "Worker", "Nanny"):
        monkeypatch.setattr(getattr(distributed, name), "__init__", refusal(f"a Dask {name}"))
