"""Event records: what every device reports, and all that the UI, the run store, trace exports
and benchmarks read (docs/architecture/events.md, "Events")."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import Enum
from typing import Any, NamedTuple, TypedDict


class Phase(str, Enum):
    """What a device spent an interval on. Each member is its own name as a string (a
    ``StrEnum``, written so for Python 3.10): the event log, ``events.jsonl``, trace exports
    and the dashboard's messages carry the same names as before, and a name read back from a
    file compares equal to its member."""

    # As ``StrEnum``: ``str()`` and f-strings give the name itself, on every Python version.
    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, format_spec: str) -> str:
        return str.__format__(self, format_spec)

    COMPUTE = "compute"
    SEND = "send"
    RECV = "recv"
    ALLREDUCE = "allreduce"
    PS_PUSH = "ps-push"
    PS_PULL = "ps-pull"
    UPDATE = "update"
    IDLE = "idle"
    FAILURE = "failure"
    RECOVERY = "recovery"
    DROPPED = "dropped"


# What went wrong and how the run got over it (docs/architecture/faults.md, "Faults and
# stragglers"): ``failure`` marks, at the moment it was noticed, the device that died or
# stalled (start == end); ``recovery`` spans, on every device of the restored run, from that
# moment to its first step after the restore; ``dropped`` is a gradient push the parameter
# server discarded (a backup worker's late gradient, or an update in flight when its worker
# died).
FAULT_PHASES: tuple[Phase, ...] = (Phase.FAILURE, Phase.RECOVERY, Phase.DROPPED)
PHASES: tuple[Phase, ...] = tuple(Phase)
# Phases spent moving tensors between devices (the rest of a device's busy time is compute).
COMMUNICATION_PHASES: tuple[Phase, ...] = (
    Phase.SEND,
    Phase.RECV,
    Phase.ALLREDUCE,
    Phase.PS_PUSH,
    Phase.PS_PULL,
)
# The phases that count as a device being busy: measured summaries and the simulator's
# predicted timelines both count these, so their busy fractions compare.
BUSY_PHASES: tuple[Phase, ...] = (Phase.COMPUTE, Phase.UPDATE)


class PhaseEvent(NamedTuple):
    """Device ``device`` spent [start, end) (seconds since the run started, wall clock) in
    ``phase`` during global step ``step``, sending ``bytes`` and receiving ``bytes_received``
    over the wire (both 0 for compute). ``path`` says how those bytes travelled, e.g.
    ``shared-memory``, ``tls`` (Dask's comms of a cluster the workbench starts) or ``tcp``
    between CPU devices, ``host-staged:shared-memory``, ``host-staged:tls``, ``device:ucx`` or
    ``device:nccl`` between GPU devices ("" when nothing moved). ``reason``: why, for a
    ``failure`` (e.g. ``task0-cpu0: StallError: ...``); "" otherwise, and in records written
    before failures carried one. ``action``: what a pipeline stage's ``compute`` ran, its
    schedule's action (``F3``: forward of micro-batch 3, ``B3`` its backward, ``I3``/``W3`` its
    input- and weight-gradient halves; ``F3@1`` on model chunk 1 of a device holding several);
    "" for every other event.

    Devices make several a step and send them back in their task's report, so the record is a
    ``NamedTuple``: read by field name, and cheaper to make and to pickle (see ``__reduce__``)
    than a dataclass.
    """

    device: str
    phase: Phase
    step: int
    start: float
    end: float
    bytes: int = 0
    bytes_received: int = 0
    path: str = ""
    reason: str = ""
    action: str = ""

    def __reduce__(self) -> tuple[type[PhaseEvent], tuple[Any, ...]]:
        # The class and its fields. Pickle's default for a NamedTuple goes through ``copyreg``
        # and ``__getnewargs__`` for every event, which is slower.
        return (PhaseEvent, tuple(self))

    @property
    def duration(self) -> float:
        return self.end - self.start

    def to_dict(self) -> dict[str, Any]:
        fields: dict[str, Any] = {"kind": "phase", **self._asdict()}
        fields["phase"] = str(self.phase)  # the name as a plain string, as files always had it
        if not self.reason:
            del fields["reason"]  # only failures carry one: the other lines stay as they were
        if not self.action:
            del fields["action"]  # only pipeline stages' computes carry one
        return fields

    @classmethod
    def from_dict(cls, fields: dict[str, Any]) -> PhaseEvent:
        """The event of a ``to_dict`` form without its ``kind`` (an unknown phase is a
        ``ValueError``)."""
        return cls(**{**fields, "phase": Phase(fields["phase"])})


class _StepReportCore(TypedDict):
    events: list[PhaseEvent]
    losses: list[tuple[int, float | None]]  # None: a device that computes no loss


class StepReport(_StepReportCore, total=False):
    """What a device's task returns for the steps it ran, for the client to log: its phase
    events, a ``(step, loss)`` per step, and where the strategy has them ``(step, staleness)``
    pairs, ``(name, step, value, device)`` scalars, and the device's name (a free-running
    worker's report, which the client drains from a shard)."""

    staleness: list[tuple[int, int]]
    scalars: list[tuple[str, int, float, str]]
    device: str


@dataclass(frozen=True)
class ScalarEvent:
    """A per-step scalar such as ``loss``, ``lr`` or ``samples_per_second``."""

    name: str
    step: int
    value: float
    time: float
    device: str | None = None

    def to_dict(self) -> dict:
        return {"kind": "scalar", **asdict(self)}
