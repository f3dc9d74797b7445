"""Pipeline schedules as plain per-stage action lists, checked without running anything.

A schedule gives, for each stage (device), the order in which it runs the forward (``F``) and
backward (``B``) pass of each micro-batch. Data dependencies are implied: F(s, m) needs
F(s-1, m); B(s, m) needs B(s+1, m) and F(s, m). :func:`play_schedule` plays a schedule with
given op durations and reports deadlocks, the makespan, each stage's idle (bubble) time and the
peak number of micro-batches a stage holds activations for.

- GPipe (Huang et al. 2019): all forwards, then all backwards (in reverse). Simple, bubble
  (P-1)/(M+P-1), but every stage holds all M micro-batches' activations.
- 1F1B (PipeDream-Flush, Narayanan et al. 2021): stage s runs min(P-s-1, M) warm-up forwards,
  then alternates one forward, one backward, then drains. Same bubble, but at most
  min(P-s, M) micro-batches in flight on stage s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

SCHEDULE_NAMES = ("gpipe", "1f1b")

# What a stage runs for a micro-batch: its forward or its backward pass.
ActionKind = Literal["F", "B"]
FORWARD: Final = "F"
BACKWARD: Final = "B"


@dataclass(frozen=True)
class StageAction:
    kind: ActionKind
    microbatch: int

    def __str__(self) -> str:
        return f"{self.kind}{self.microbatch}"


def gpipe(stages: int, microbatches: int) -> list[list[StageAction]]:
    forward = [StageAction(FORWARD, m) for m in range(microbatches)]
    backward = [StageAction(BACKWARD, m) for m in reversed(range(microbatches))]
    return [forward + backward for _ in range(stages)]


def one_forward_one_backward(stages: int, microbatches: int) -> list[list[StageAction]]:
    schedule = []
    for stage in range(stages):
        warmup = min(stages - stage - 1, microbatches)
        actions = [StageAction(FORWARD, m) for m in range(warmup)]
        next_forward, next_backward = warmup, 0
        while next_backward < microbatches:
            if next_forward < microbatches:
                actions.append(StageAction(FORWARD, next_forward))
                next_forward += 1
            actions.append(StageAction(BACKWARD, next_backward))
            next_backward += 1
        schedule.append(actions)
    return schedule


def make_schedule(name: str, stages: int, microbatches: int) -> list[list[StageAction]]:
    if name == "gpipe":
        return gpipe(stages, microbatches)
    if name == "1f1b":
        return one_forward_one_backward(stages, microbatches)
    raise ValueError(f"--schedule: unknown schedule {name!r}; choose one of: gpipe, 1f1b")


class ScheduleError(ValueError):
    """A schedule that misses work, repeats it or cannot make progress."""


@dataclass(frozen=True)
class PlayedSchedule:
    makespan: float
    busy: tuple[float, ...]  # per stage
    peak_in_flight: tuple[int, ...]  # per stage
    finish: dict  # (stage, kind, microbatch) -> end time

    @property
    def bubble_fraction(self) -> float:
        """Idle share of all stage-time: 1 - total busy / (stages x makespan)."""
        return 1.0 - sum(self.busy) / (len(self.busy) * self.makespan)


def play_schedule(
    schedule: list[list[StageAction]], forward_cost: float = 1.0, backward_cost: float = 2.0
) -> PlayedSchedule:
    """Play the schedule: each stage runs its next action as soon as its inputs exist."""
    stages = len(schedule)
    microbatches = {a.microbatch for a in schedule[0]}
    for stage, actions in enumerate(schedule):
        expected = {(k, m) for k in (FORWARD, BACKWARD) for m in microbatches}
        seen = [(a.kind, a.microbatch) for a in actions]
        if len(seen) != len(set(seen)) or set(seen) != expected:
            raise ScheduleError(f"stage {stage} must run F and B of every micro-batch once")
    finish: dict[tuple[int, ActionKind, int], float] = {}
    clock = [0.0] * stages
    position = [0] * stages
    in_flight = [0] * stages
    peak = [0] * stages
    busy = [0.0] * stages
    while any(position[s] < len(schedule[s]) for s in range(stages)):
        progressed = False
        for stage in range(stages):
            if position[stage] == len(schedule[stage]):
                continue
            action = schedule[stage][position[stage]]
            needs: list[tuple[int, ActionKind, int]] = []
            if action.kind == FORWARD and stage > 0:
                needs.append((stage - 1, FORWARD, action.microbatch))
            if action.kind == BACKWARD:
                needs.append((stage, FORWARD, action.microbatch))
                if stage < stages - 1:
                    needs.append((stage + 1, BACKWARD, action.microbatch))
            if any(need not in finish for need in needs):
                continue
            start = max([clock[stage], *(finish[need] for need in needs)])
            cost = forward_cost if action.kind == FORWARD else backward_cost
            clock[stage] = start + cost
            busy[stage] += cost
            finish[(stage, action.kind, action.microbatch)] = clock[stage]
            in_flight[stage] += 1 if action.kind == FORWARD else -1
            peak[stage] = max(peak[stage], in_flight[stage])
            position[stage] += 1
            progressed = True
        if not progressed:
            stuck = {
                s: str(schedule[s][position[s]])
                for s in range(stages)
                if position[s] < len(schedule[s])
            }
            raise ScheduleError(f"deadlock: every stage waits ({stuck})")
    return PlayedSchedule(max(clock), tuple(busy), tuple(peak), finish)


def gpipe_bubble(stages: int, microbatches: int) -> float:
    """The GPipe paper's bubble: (P - 1) / (M + P - 1)."""
    return (stages - 1) / (microbatches + stages - 1)
