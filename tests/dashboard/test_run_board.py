"""The scheduler-side run board, without Dask: sequence numbers, bounds, which run is newest."""

import pytest

from workbench.dashboard import run_board
from workbench.dashboard.run_board import RunBoard
from workbench.dashboard.wire_rows import event_rows
from workbench.events.records import PhaseEvent, ScalarEvent


def loss(step: int) -> tuple:
    (row,) = event_rows([ScalarEvent("loss", step, 1.0 / (step + 1), 0.1 * step)])
    return row


def compute(step: int, device: str = "/task:0") -> tuple:
    (row,) = event_rows([PhaseEvent(device, "compute", step, 0.1 * step, 0.1 * step + 0.05)])
    return row


def test_a_reader_keeps_its_place_across_batches():
    board = RunBoard()
    board.publish("a", [loss(0), compute(0)], {"strategy": "mirrored"})
    first, position = board.read("a", 0)
    board.publish("a", [compute(1), loss(1)])
    second, position = board.read("a", position)
    assert [type(event).__name__ for event in first] == ["ScalarEvent", "PhaseEvent"]
    assert [(type(event).__name__, event.step) for event in second] == [
        ("PhaseEvent", 1),
        ("ScalarEvent", 1),
    ]
    assert board.read("a", position) == ([], 4)


def test_phases_never_push_the_loss_curve_out(monkeypatch):
    monkeypatch.setattr(run_board, "PHASES_KEPT", 5)
    board = RunBoard()
    board.publish("a", [loss(0)] + [compute(step) for step in range(20)] + [loss(1)])
    events, position = board.read("a", 0)
    assert [event.step for event in events if isinstance(event, ScalarEvent)] == [0, 1]
    assert [event.step for event in events if isinstance(event, PhaseEvent)] == list(range(15, 20))
    assert position == 22
    assert board.summary()["a"]["kept"] == 7


def test_the_newest_run_is_followed_and_old_finished_runs_go_first(monkeypatch):
    monkeypatch.setattr(run_board, "RUNS_KEPT", 2)
    board = RunBoard()
    assert board.latest() is None
    board.publish("live", [loss(0)])
    board.publish("done", [loss(0)], finished=True)
    board.publish("new", [loss(0)])
    assert board.latest() == "new"
    assert list(board.summary()) == ["live", "new"]


def test_a_malformed_batch_stores_nothing():
    board = RunBoard()
    with pytest.raises(ValueError, match="event row 1"):
        board.publish("a", [loss(0), (1, "loss")])
    with pytest.raises(ValueError, match="unknown phase 'napping'"):
        board.publish("a", [loss(0), (*compute(0)[:2], "napping", *compute(0)[3:])])
    assert board.read("a", 0) == ([], 0)
