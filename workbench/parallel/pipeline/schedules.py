"""Pipeline schedules as plain per-device action lists, checked without running anything.

A schedule gives, for each device of the pipeline, the order in which it runs its actions on
micro-batches: a forward (``F``), a whole backward (``B``), or a backward split in two halves,
the input gradient (``I``, which the previous stage waits for) and the weight gradient (``W``,
which nobody waits for). A schedule uses either ``B`` or ``I`` + ``W`` for each micro-batch.

With virtual stages (interleaving), the model is cut into ``V x P`` chunks for ``P`` devices
and device ``s`` holds model chunks ``s, s + P, s + 2P, ...`` (Megatron-LM's layout): an
action's ``chunk`` is that local index, and model chunk ``k = chunk x P + s``. Data
dependencies are implied: F of model chunk k needs F of chunk k-1; B or I of chunk k needs F of
chunk k and B or I of chunk k+1; W needs the I of the same chunk and micro-batch.
:func:`play_schedule` plays a schedule with per-kind costs and reports deadlocks, the makespan,
each device's idle (bubble) time and the peak number of micro-batch activations it holds.

- GPipe (Huang et al. 2019): all forwards, then all backwards (in reverse). Bubble
  (P-1)/(M+P-1), but every stage holds all M micro-batches' activations.
- 1F1B (PipeDream-Flush, Narayanan et al. 2021): stage s runs min(P-s-1, M) warm-up forwards,
  then alternates one forward, one backward, then drains. Same bubble, but at most
  min(P-s, M) micro-batches in flight on stage s.
- Interleaved 1F1B (Narayanan et al. 2021, Megatron-LM's
  ``forward_backward_pipelining_with_interleaving``): V chunks per device, micro-batches taken
  in groups of P through each chunk in turn; the pipeline fills V times faster, so the bubble
  shrinks V-fold, at the price of V times more point-to-point messages.
- ZB-H1 (Qi et al. 2023, "Zero Bubble Pipeline Parallelism"): 1F1B's warm-up with the backward
  split into I and W; stage s postpones up to s weight-gradient actions, which then fill the
  cool-down where 1F1B waits. Every device holds at most min(P, M) micro-batches, 1F1B's peak.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

SCHEDULE_NAMES = ("gpipe", "1f1b", "interleaved-1f1b", "zero-bubble")

# What a device runs for a micro-batch: its forward, its whole backward, or one half of a split
# backward (input gradient, weight gradient).
ActionKind = Literal["F", "B", "I", "W"]
FORWARD: Final = "F"
BACKWARD: Final = "B"
INPUT_GRAD: Final = "I"
WEIGHT_GRAD: Final = "W"


@dataclass(frozen=True)
class StageAction:
    kind: ActionKind
    microbatch: int
    chunk: int = 0  # the device's local model chunk (model chunk chunk x P + device)

    def __str__(self) -> str:
        text = f"{self.kind}{self.microbatch}"
        return f"{text}@{self.chunk}" if self.chunk else text


class ScheduleError(ValueError):
    """A schedule that misses work, repeats it or cannot make progress, or one asked for with
    settings it cannot take (the message names the flag)."""


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


def interleaved_one_forward_one_backward(
    stages: int, microbatches: int, virtual_stages: int
) -> list[list[StageAction]]:
    """Megatron-LM's interleaved 1F1B: V model chunks per device.

    Each device numbers its V x M forward (and backward) units 0, 1, ...; unit ``u`` is
    micro-batch ``(u // (P V)) P + u % P`` of local chunk ``(u % (P V)) // P`` for a forward,
    and of chunk ``V - 1 - (u % (P V)) // P`` for a backward (backwards go through the chunks in
    reverse). Device s runs ``2 (P - s - 1) + (V - 1) P`` warm-up forwards (all of them when
    M = P), then one forward and one backward in turn, then the remaining backwards. Megatron
    requires M to be a multiple of P, so that the groups of P micro-batches come out whole.
    """
    if virtual_stages == 1:
        return one_forward_one_backward(stages, microbatches)
    if microbatches % stages:
        raise ScheduleError(
            f"--microbatches: interleaved-1f1b needs a multiple of the {stages} pipeline "
            f"stages (got {microbatches})"
        )
    group = stages * virtual_stages
    units = microbatches * virtual_stages

    def unit(kind: ActionKind, index: int) -> StageAction:
        microbatch = (index // group) * stages + index % stages
        chunk = (index % group) // stages
        if kind == BACKWARD:
            chunk = virtual_stages - 1 - chunk
        return StageAction(kind, microbatch, chunk)

    schedule = []
    for stage in range(stages):
        if microbatches == stages:
            warmup = units
        else:
            warmup = min(2 * (stages - stage - 1) + (virtual_stages - 1) * stages, units)
        actions = [unit(FORWARD, u) for u in range(warmup)]
        for u in range(units - warmup):
            actions.append(unit(FORWARD, warmup + u))
            actions.append(unit(BACKWARD, u))
        actions.extend(unit(BACKWARD, u) for u in range(units - warmup, units))
        schedule.append(actions)
    return schedule


def zero_bubble_h1(stages: int, microbatches: int) -> list[list[StageAction]]:
    """ZB-H1: 1F1B with the backward split, stage s keeping up to s weight gradients pending.

    Stage s runs min(P - s - 1, M) warm-up forwards, then per micro-batch a forward (while any
    are left) and an input gradient I, then a weight gradient W whenever more than s are
    pending; the rest drain at the end. The last stage thus runs F I F I ... back to back (it
    sends the input gradients upstream as fast as it can), and the first stage, which waits
    longest in the cool-down, fills that wait with its W actions. Micro-batches held (from F to
    W) per stage: (P - s - 1) + 1 + s = P at most.
    """
    schedule = []
    for stage in range(stages):
        warmup = min(stages - stage - 1, microbatches)
        actions = [StageAction(FORWARD, m) for m in range(warmup)]
        next_forward, next_input, next_weight = warmup, 0, 0
        while next_input < microbatches:
            if next_forward < microbatches:
                actions.append(StageAction(FORWARD, next_forward))
                next_forward += 1
            actions.append(StageAction(INPUT_GRAD, next_input))
            next_input += 1
            if next_input - next_weight > stage:
                actions.append(StageAction(WEIGHT_GRAD, next_weight))
                next_weight += 1
        actions.extend(StageAction(WEIGHT_GRAD, m) for m in range(next_weight, microbatches))
        schedule.append(actions)
    return schedule


def make_schedule(
    name: str, stages: int, microbatches: int, virtual_stages: int = 1
) -> list[list[StageAction]]:
    """Each device's action list; ``virtual_stages`` is read by interleaved-1f1b only."""
    if name == "gpipe":
        return gpipe(stages, microbatches)
    if name == "1f1b":
        return one_forward_one_backward(stages, microbatches)
    if name == "interleaved-1f1b":
        return interleaved_one_forward_one_backward(stages, microbatches, virtual_stages)
    if name == "zero-bubble":
        return zero_bubble_h1(stages, microbatches)
    raise ValueError(
        f"--schedule: unknown schedule {name!r}; choose one of: {', '.join(SCHEDULE_NAMES)}"
    )


@dataclass(frozen=True)
class ActionCosts:
    """How long each kind of action takes (per model chunk). A whole backward B is usually
    about twice a forward; its halves I and W about one forward each."""

    forward: float = 1.0
    backward: float = 2.0
    input_grad: float = 1.0
    weight_grad: float = 1.0

    def of(self, kind: ActionKind) -> float:
        return {
            FORWARD: self.forward,
            BACKWARD: self.backward,
            INPUT_GRAD: self.input_grad,
            WEIGHT_GRAD: self.weight_grad,
        }[kind]


@dataclass(frozen=True)
class PlayedSchedule:
    makespan: float
    busy: tuple[float, ...]  # per device
    # Per device: the most micro-batch activations held at once, one per (chunk, micro-batch)
    # from its F until its B, or until its W for a split backward (W still reads the stored
    # input; the rest could go at I, so this is an upper bound for split backwards).
    peak_in_flight: tuple[int, ...]
    ends: dict[tuple[int, StageAction], float]  # (device, action) -> end time

    @property
    def finish(self) -> dict[tuple[int, ActionKind, int], float]:
        """(device, kind, micro-batch) -> end time of the actions on each device's first chunk
        (all of them in a schedule without virtual stages)."""
        return {(d, a.kind, a.microbatch): end for (d, a), end in self.ends.items() if not a.chunk}

    @property
    def bubble_fraction(self) -> float:
        """Idle share of all device-time: 1 - total busy / (devices x makespan)."""
        return 1.0 - sum(self.busy) / (len(self.busy) * self.makespan)


def _check_complete(schedule: list[list[StageAction]]) -> tuple[int, int]:
    """The micro-batch and chunk counts, once every device runs every unit of work once."""
    everything = [a for actions in schedule for a in actions]
    microbatches = 1 + max((a.microbatch for a in everything), default=-1)
    chunks = 1 + max((a.chunk for a in everything), default=-1)
    whole = ({FORWARD, BACKWARD}, {FORWARD, INPUT_GRAD, WEIGHT_GRAD})
    for device, actions in enumerate(schedule):
        kinds: dict[tuple[int, int], set[str]] = {}
        for a in actions:
            kinds.setdefault((a.chunk, a.microbatch), set()).add(a.kind)
        if (
            len(actions) != sum(len(k) for k in kinds.values())
            or len(kinds) != chunks * microbatches
            or any(k not in whole for k in kinds.values())
        ):
            raise ScheduleError(
                f"device {device} must run F and either B or I and W of every micro-batch "
                "and chunk once"
            )
    return microbatches, chunks


def _needs(
    device: int, action: StageAction, devices: int, chunks: int, split: set[tuple[int, int]]
) -> list[tuple[int, StageAction]]:
    """The (device, action) pairs that must finish before this one starts."""
    model_chunk = action.chunk * devices + device
    m = action.microbatch
    if action.kind == FORWARD:
        if model_chunk == 0:
            return []
        previous = model_chunk - 1
        return [(previous % devices, StageAction(FORWARD, m, previous // devices))]
    if action.kind == WEIGHT_GRAD:
        return [(device, StageAction(INPUT_GRAD, m, action.chunk))]
    needs = [(device, StageAction(FORWARD, m, action.chunk))]
    following = model_chunk + 1
    if following < chunks * devices:
        there = following % devices
        kind: ActionKind = INPUT_GRAD if (following, m) in split else BACKWARD
        needs.append((there, StageAction(kind, m, following // devices)))
    return needs


def play_schedule(
    schedule: list[list[StageAction]],
    forward_cost: float = 1.0,
    backward_cost: float = 2.0,
    input_grad_cost: float | None = None,
    weight_grad_cost: float | None = None,
) -> PlayedSchedule:
    """Play the schedule: each device runs its next action as soon as its inputs exist.

    The halves of a split backward cost half a backward each unless given.
    """
    costs = ActionCosts(
        forward_cost,
        backward_cost,
        backward_cost / 2 if input_grad_cost is None else input_grad_cost,
        backward_cost / 2 if weight_grad_cost is None else weight_grad_cost,
    )
    return play(schedule, costs)


def play(
    schedule: list[list[StageAction]], costs: ActionCosts | Sequence[ActionCosts]
) -> PlayedSchedule:
    """:func:`play_schedule` with the costs in one record, or one per device (stages that
    differ: the model's first has no input gradient to compute)."""
    devices = len(schedule)
    per_device = [costs] * devices if isinstance(costs, ActionCosts) else list(costs)
    if len(per_device) != devices:
        raise ValueError(f"need the costs of each of the {devices} devices")
    _, chunks = _check_complete(schedule)
    split = {
        (a.chunk * devices + device, a.microbatch)
        for device, actions in enumerate(schedule)
        for a in actions
        if a.kind == INPUT_GRAD
    }
    ends: dict[tuple[int, StageAction], float] = {}
    clock = [0.0] * devices
    position = [0] * devices
    in_flight = [0] * devices
    peak = [0] * devices
    busy = [0.0] * devices
    while any(position[s] < len(schedule[s]) for s in range(devices)):
        progressed = False
        for device in range(devices):
            if position[device] == len(schedule[device]):
                continue
            action = schedule[device][position[device]]
            needs = _needs(device, action, devices, chunks, split)
            if any(need not in ends for need in needs):
                continue
            start = max([clock[device], *(ends[need] for need in needs)])
            cost = per_device[device].of(action.kind)
            clock[device] = start + cost
            busy[device] += cost
            ends[(device, action)] = clock[device]
            if action.kind == FORWARD:
                in_flight[device] += 1
            elif action.kind in (BACKWARD, WEIGHT_GRAD):
                in_flight[device] -= 1
            peak[device] = max(peak[device], in_flight[device])
            position[device] += 1
            progressed = True
        if not progressed:
            stuck = {
                s: str(schedule[s][position[s]])
                for s in range(devices)
                if position[s] < len(schedule[s])
            }
            raise ScheduleError(f"deadlock: every stage waits ({stuck})")
    return PlayedSchedule(max(clock), tuple(busy), tuple(peak), ends)


def gpipe_bubble(stages: int, microbatches: int) -> float:
    """The GPipe paper's bubble: (P - 1) / (M + P - 1)."""
    return (stages - 1) / (microbatches + stages - 1)


def bubble_formula(
    name: str,
    stages: int,
    microbatches: int,
    virtual_stages: int = 1,
    costs: ActionCosts = ActionCosts(),
) -> float:
    """The theoretical idle share of all device-time of a schedule, with P stages, M
    micro-batches, V virtual stages (interleaved-1f1b only) and the per-kind costs.

    - gpipe, 1f1b: each device is busy M (F + B); the first micro-batch's forward reaches the
      last device after (P - 1) F and the last backward leaves it (P - 1) B before the end, so
      the makespan is (M + P - 1)(F + B) and the bubble (P - 1) / (M + P - 1), whatever F and B.
    - interleaved-1f1b: a chunk's actions take 1/V of a whole stage's, so the fill and drain
      take (P - 1)(F + B) / V: Megatron's bubble, (1/V)(P - 1)/M of the ideal time M (F + B).
      As a share of the total: (P - 1) / (V M + P - 1).
    - zero-bubble (ZB-H1, with F, I and W the costs of the whole stage's forward and backward
      halves): each device is busy M (F + I + W). The paper's bubble per device is
      (P - 1)(F + I - W): the warm-up still waits (P - 1)(F + I) for the first input gradient
      to come back, and the postponed weight gradients fill (P - 1) W of the cool-down. That
      takes W <= F and W <= I (a W fits the gap one forward or input gradient leaves); a
      longer W fills only such a gap, so in general the idle time is
      (P - 1)(F + I - min(W, F, I)), and the share
      (P - 1)(F + I - w) / (M (F + I + W) + (P - 1)(F + I - w)) with w = min(W, F, I). With
      F = I = W it is (P - 1) / (3 M + P - 1): a third of 1F1B's bubble time. It is exact for
      M >= P; fewer micro-batches leave less to postpone, and the played bubble is larger.
    """
    p, m = stages, microbatches
    if name in ("gpipe", "1f1b"):
        return (p - 1) / (m + p - 1)
    if name == "interleaved-1f1b":
        return (p - 1) / (virtual_stages * m + p - 1)
    if name == "zero-bubble":
        filled = min(costs.weight_grad, costs.forward, costs.input_grad)
        idle = (p - 1) * (costs.forward + costs.input_grad - filled)
        return idle / (m * (costs.forward + costs.input_grad + costs.weight_grad) + idle)
    raise ValueError(
        f"--schedule: unknown schedule {name!r}; choose one of: {', '.join(SCHEDULE_NAMES)}"
    )
