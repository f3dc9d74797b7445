"""Event records: what every device reports, and all that the UI, the run store, trace exports
and benchmarks read (docs/architecture.md, "Events")."""

from __future__ import annotations

from dataclasses import asdict, dataclass

# What went wrong and how the run got over it (docs/architecture.md, "Faults and stragglers"):
# ``failure`` marks, at the moment it was noticed, the device that died or stalled (start ==
# end); ``recovery`` spans, on every device of the restored run, from that moment to its first
# step after the restore; ``dropped`` is a gradient push the parameter server discarded (a
# backup worker's late gradient, or an update in flight when its worker died).
FAULT_PHASES = ("failure", "recovery", "dropped")
PHASES = (
    "compute",
    "send",
    "recv",
    "allreduce",
    "ps-push",
    "ps-pull",
    "update",
    "idle",
    *FAULT_PHASES,
)
# Phases spent moving tensors between devices (the rest of a device's busy time is compute).
COMMUNICATION_PHASES = ("send", "recv", "allreduce", "ps-push", "ps-pull")
# The phases that count as a device being busy: measured summaries and the simulator's
# predicted timelines both count these, so their busy fractions compare.
BUSY_PHASES = ("compute", "update")


@dataclass(frozen=True)
class PhaseEvent:
    """Device ``device`` spent [start, end) (seconds since the run started, wall clock) in
    ``phase`` during global step ``step``, sending ``bytes`` and receiving ``bytes_received``
    over the wire (both 0 for compute). ``path`` says how those bytes travelled, e.g.
    ``shared-memory``, ``tls`` (Dask's comms of a cluster the workbench starts) or ``tcp``
    between CPU devices, ``host-staged:shared-memory``, ``host-staged:tls``, ``device:ucx`` or
    ``device:nccl`` between GPU devices ("" when nothing moved). ``reason``: why, for a
    ``failure`` (e.g. ``task0-cpu0: StallError: ...``); "" otherwise, and in records written
    before failures carried one."""

    device: str
    phase: str
    step: int
    start: float
    end: float
    bytes: int = 0
    bytes_received: int = 0
    path: str = ""
    reason: str = ""

    @property
    def duration(self) -> float:
        return self.end - self.start

    def to_dict(self) -> dict:
        fields = asdict(self)
        if not self.reason:
            del fields["reason"]  # only failures carry one: the other lines stay as they were
        return {"kind": "phase", **fields}


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
