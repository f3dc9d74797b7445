"""Events cross from the client to the scheduler's board as rows: every field of every kind of
event comes back equal after Dask's own serialisation, and a malformed row is refused."""

import math

import pytest
from distributed.protocol import dumps, loads

from workbench.dashboard.wire_rows import event_rows, events_of
from workbench.events.records import Phase, PhaseEvent, ScalarEvent

EVENTS = [
    PhaseEvent("/task:0", Phase.COMPUTE, 7, 1.25, 1.5, action="F3@1"),
    PhaseEvent("/task:1", Phase.PS_PUSH, 7, 1.5, 1.75, 2_674_688, 0, "shared-memory"),
    PhaseEvent("/task:1", Phase.FAILURE, 8, 2.0, 2.0, reason="task1-cpu0: StallError: late"),
    ScalarEvent("loss", 7, 2.25, 1.8),
    ScalarEvent("gradient_bytes", 7, 5_349_376.0, 1.8, device="/task:1"),
]


def test_events_come_back_equal_through_dasks_wire():
    message = loads(dumps({"op": "publish", "events": event_rows(EVENTS)}))
    back = events_of(message["events"])
    assert back == EVENTS
    assert all(type(event.phase) is Phase for event in back if isinstance(event, PhaseEvent))


def test_a_nan_loss_stays_nan():
    (event,) = events_of(
        loads(dumps({"rows": event_rows([ScalarEvent("loss", 0, math.nan, 0.1)])}))["rows"]
    )
    assert math.isnan(event.value)


@pytest.mark.parametrize(
    "row, named",
    [
        ((2, "loss", 0, 1.0, 0.1, None), "event row 0"),
        ((1, "loss", 0), "event row 0"),
        ((0, "/task:0", "napping", 0, 0.0, 0.1, 0, 0, "", "", ""), "unknown phase 'napping'"),
        ((), "event row 0"),
    ],
)
def test_a_malformed_row_is_named(row, named):
    with pytest.raises(ValueError, match=named):
        events_of([row])
