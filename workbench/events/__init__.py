"""Events: per-device phase intervals with bytes, and per-step scalars (docs/architecture/events.md,
"Events").

Devices emit; the UI, the run store, trace exports and benchmarks read — nothing reads a
strategy's private state. Times are seconds on the run's ``perf_counter`` clock.
"""

from workbench.events.log import EventLog
from workbench.events.records import (
    FAULT_PHASES,
    PHASES,
    Phase,
    PhaseEvent,
    ScalarEvent,
    StepReport,
)
from workbench.events.summary import bubble_fraction, summarize, warmup_steps

__all__ = [
    "FAULT_PHASES",
    "PHASES",
    "EventLog",
    "Phase",
    "PhaseEvent",
    "ScalarEvent",
    "StepReport",
    "bubble_fraction",
    "summarize",
    "warmup_steps",
]
