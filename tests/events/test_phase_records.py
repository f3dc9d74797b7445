"""Phase names are one type, device reports are ``PhaseEvent`` records read by field name, and
what reaches ``events.jsonl`` is what it always was."""

from __future__ import annotations

import ast
import json
import pickle
from pathlib import Path
from types import SimpleNamespace

import pytest

from workbench.calibration.probe import _chunk_report
from workbench.events import PHASES, Phase, PhaseEvent
from workbench.events.records import BUSY_PHASES, COMMUNICATION_PHASES, FAULT_PHASES
from workbench.parallel.parameter_server.worker_loop import ParameterServerWorker
from workbench.store.run_store import _event_from_line, event_from_dict

WORKBENCH = Path(__file__).resolve().parents[2] / "workbench"
# The names every events file and trace export has carried.
FILE_NAMES = (
    "compute",
    "send",
    "recv",
    "allreduce",
    "ps-push",
    "ps-pull",
    "update",
    "idle",
    "failure",
    "recovery",
    "dropped",
)


def test_every_phase_is_a_member_that_writes_the_name_files_hold():
    assert [str(phase) for phase in PHASES] == list(FILE_NAMES)
    assert all(isinstance(phase, Phase) for phase in PHASES)
    for group in (BUSY_PHASES, COMMUNICATION_PHASES, FAULT_PHASES):
        assert all(isinstance(phase, Phase) for phase in group)
    assert f"{Phase.PS_PUSH}" == "ps-push" and Phase("ps-pull") is Phase.PS_PULL
    event = PhaseEvent("/task:0", Phase.PS_PUSH, 3, 0.5, 0.75, 10, 20, "tls")
    line = json.dumps(event.to_dict())
    assert line == (
        '{"kind": "phase", "device": "/task:0", "phase": "ps-push", "step": 3, "start": 0.5, '
        '"end": 0.75, "bytes": 10, "bytes_received": 20, "path": "tls"}'
    )
    assert type(event.to_dict()["phase"]) is str  # a plain string, whatever serialises it


def test_a_phase_event_pickles_as_itself_and_reads_by_name():
    event = PhaseEvent("/task:1", Phase.FAILURE, 7, 2.0, 2.0, reason="task1-cpu0: died")
    back = pickle.loads(pickle.dumps([event, event], protocol=5))
    assert back == [event, event]
    assert type(back[0]) is PhaseEvent and back[0].phase is Phase.FAILURE
    assert (back[0].device, back[0].step, back[0].start, back[0].reason) == (
        "/task:1",
        7,
        2.0,
        "task1-cpu0: died",
    )
    assert back[0].duration == 0.0


def test_lines_of_an_events_file_read_back_as_members_and_an_unknown_phase_is_refused():
    fields = {"kind": "phase", "device": "d", "phase": "allreduce", "step": 0, "start": 0, "end": 1}
    assert event_from_dict(fields).phase is Phase.ALLREDUCE
    with pytest.raises(ValueError, match="warp"):
        event_from_dict({**fields, "phase": "warp"})
    assert _event_from_line(json.dumps({**fields, "phase": "warp"}).encode()) is None


def test_device_reports_hold_phase_events():
    probe = _chunk_report("/task:0", 4, 2)["events"]
    assert probe and all(type(event) is PhaseEvent for event in probe)
    assert {event.phase for event in probe} == {Phase.COMPUTE, Phase.ALLREDUCE, Phase.UPDATE}
    worker = SimpleNamespace(device="/task:2", route="tls", clock=lambda: 9.0)
    pushed = {"dropped": True, "sent": 64}
    phases = ParameterServerWorker._phases(worker, 5, 1.0, 2.0, 3.0, 32, pushed)
    assert [(e.phase, e.start, e.end, e.bytes, e.bytes_received) for e in phases] == [
        (Phase.PS_PULL, 1.0, 2.0, 0, 32),
        (Phase.COMPUTE, 2.0, 3.0, 0, 0),
        (Phase.DROPPED, 3.0, 9.0, 64, 0),
    ]


def _raw_events(tree: ast.AST) -> list[int]:
    """Lines of ``tree`` that make a phase event from a bare phase string: a ``PhaseEvent(...)``
    or ``.phase(...)`` call, or a tuple of at least seven items (a device report's old shape),
    whose second item is one of the names."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            function = node.func
            name = function.id if isinstance(function, ast.Name) else getattr(function, "attr", "")
            items = node.args if name in ("PhaseEvent", "phase") else []
        elif isinstance(node, ast.Tuple) and len(node.elts) >= 7:
            items = node.elts
        else:
            continue
        if len(items) > 1 and isinstance(items[1], ast.Constant) and items[1].value in FILE_NAMES:
            lines.append(node.lineno)
    return lines


def test_no_module_makes_a_phase_event_from_a_bare_string():
    found = {
        str(path.relative_to(WORKBENCH)): lines
        for path in sorted(WORKBENCH.rglob("*.py"))
        if (lines := _raw_events(ast.parse(path.read_text(), str(path))))
    }
    assert found == {}
