"""The shard protocol's events and instructions are closed unions, dispatched by ``match``: the
type checker finds a kind a handler forgets, and at run time anything else is refused."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import typing
from pathlib import Path
from types import SimpleNamespace

import pytest

from workbench.parallel.parameter_server.protocol import (
    ApplyUpdate,
    DropPush,
    Forget,
    IgnoreDuplicate,
    Instruction,
    Pull,
    Push,
    SendParameters,
    ShardEvent,
    ShardProtocol,
    Stop,
)
from workbench.parallel.parameter_server.shard_service import ParameterShard

ROOT = Path(__file__).resolve().parents[3]


def test_the_unions_name_every_event_and_instruction():
    assert typing.get_args(ShardEvent) == (Pull, Push, Forget, Stop)
    assert typing.get_args(Instruction) == (ApplyUpdate, SendParameters, DropPush, IgnoreDuplicate)


def test_a_shard_refuses_what_is_not_an_event_and_stays_as_it_was():
    shard = ShardProtocol(workers=2, mode="sync")
    shard.handle(Pull(0, 0))
    with pytest.raises(TypeError, match="not handled here: 'pull'"):
        shard.handle("pull")  # type: ignore[arg-type]
    assert (shard.version, shard.applied, shard.dropped) == (0, set(), 0)


def test_the_shard_service_carries_out_every_instruction_and_refuses_anything_else():
    # Dropped and duplicate pushes need nothing done; an object that is no instruction is an
    # error, not silently skipped.
    shard = SimpleNamespace(spec=SimpleNamespace(device="/job:ps/task:0"), events=[])
    quiet = [DropPush(0, 3), IgnoreDuplicate(1, 3)]
    ParameterShard._carry_out(shard, quiet)  # type: ignore[arg-type]
    assert shard.events == []
    with pytest.raises(TypeError, match="not handled here"):
        ParameterShard._carry_out(shard, [Pull(0, 3)])  # type: ignore[arg-type]


@pytest.mark.integration  # runs mypy in a subprocess
def test_the_type_checker_reports_a_dispatch_that_forgets_an_event(tmp_path):
    forgetful = tmp_path / "forgetful.py"
    forgetful.write_text(
        textwrap.dedent(
            """
            from workbench.parallel.parameter_server.protocol import (
                Forget, Pull, Push, ShardEvent, Stop, unhandled,
            )

            def kind(event: ShardEvent) -> str:
                match event:
                    case Pull() | Push() | Forget():
                        return "handled"
                    case _:
                        unhandled(event)
            """
        )
    )
    mypy = [sys.executable, "-m", "mypy", "--no-incremental", "--follow-imports=silent"]
    checked = subprocess.run(
        [*mypy, "--cache-dir", str(tmp_path / "cache"), str(forgetful)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert 'to "unhandled" has incompatible type "Stop"' in checked.stdout, checked.stdout
