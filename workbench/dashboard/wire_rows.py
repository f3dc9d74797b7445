"""Events as the publisher sends them to the scheduler's run board: one flat row each.

A row is the event's fields in order behind a kind tag (``PHASE`` or ``SCALAR``), so a batch is
a list of lists of strings and numbers that msgpack packs and unpacks in one piece, and the
board makes each record with one constructor call. A dictionary per event (``to_dict``, the run
store's file form) costs the client and the scheduler several times more per event, and both
run beside the devices on the same cores (docs/architecture/dask-costs.md, "What Dask costs").

Examples
--------
>>> from workbench.events.records import Phase
>>> rows = event_rows([PhaseEvent("d0", Phase.COMPUTE, 3, 0.5, 0.75)])
>>> rows
[(0, 'd0', 'compute', 3, 0.5, 0.75, 0, 0, '', '', '')]
>>> events_of(rows)[0] == PhaseEvent("d0", Phase.COMPUTE, 3, 0.5, 0.75)
True
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import fields

from workbench.events.records import Phase, PhaseEvent, ScalarEvent

Event = PhaseEvent | ScalarEvent
PHASE, SCALAR = 0, 1
_PHASE_FIELDS = len(PhaseEvent._fields)
_SCALAR_FIELDS = len(fields(ScalarEvent))
_PHASE_NAMED = {str(phase): phase for phase in Phase}


def event_rows(events: Iterable[Event]) -> list[tuple]:
    """Each event as its row: the tag, then its fields in their order (a phase by its name)."""
    rows: list[tuple] = []
    for event in events:
        if isinstance(event, PhaseEvent):
            rows.append((PHASE, event.device, str(event.phase), *event[2:]))
        else:
            rows.append((SCALAR, event.name, event.step, event.value, event.time, event.device))
    return rows


def events_of(rows: Sequence[Sequence]) -> list[Event]:
    """The events of a batch of rows; a ``ValueError`` naming the first malformed row (an
    unknown tag or phase, or the wrong number of fields) before any event is returned."""
    events: list[Event] = []
    for index, row in enumerate(rows):
        kind = row[0] if len(row) else None
        if kind == PHASE and len(row) == 1 + _PHASE_FIELDS:
            phase = _PHASE_NAMED.get(row[2])
            if phase is None:
                raise ValueError(f"event row {index}: unknown phase {row[2]!r}")
            events.append(PhaseEvent(row[1], phase, *row[3:]))
        elif kind == SCALAR and len(row) == 1 + _SCALAR_FIELDS:
            events.append(ScalarEvent(*row[1:]))
        else:
            raise ValueError(
                f"event row {index}: expected a phase row ({PHASE} and {_PHASE_FIELDS} fields) "
                f"or a scalar row ({SCALAR} and {_SCALAR_FIELDS} fields), got {list(row)!r}"
            )
    return events
