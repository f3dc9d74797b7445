"""Programs for one pipeline-parallel step, and what its timeline says about the pipeline.

Each stage plays its schedule's F/B actions in order, as ``workbench/parallel/pipeline/
stage_worker.py`` does: a forward of micro-batch m receives the activation from the previous
stage (blocking, right before computing), computes, and sends its output to the next stage; a
backward receives the output gradient from the next stage, computes (the real backward
recomputes its forward: pass that in ``backward_seconds``) and sends the input gradient back.
The first stage reads its input from the data, the last computes the loss itself. After the
last action the stage applies its optimizer update.

The schedule is taken as per-stage action lists (objects with ``.kind`` "F" or "B" and
``.microbatch``, as ``workbench.parallel.pipeline.schedules`` makes them), so this package
does not depend on the pipeline code.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from workbench.simulate.programs import MAIN, Action, Compute, Recv, Send, Signal, Wait
from workbench.simulate.timeline import Timeline


class ScheduleAction(Protocol):
    @property
    def kind(self) -> str: ...  # "F" or "B"

    @property
    def microbatch(self) -> int: ...


def pipeline_programs(
    stage_devices: Sequence[str],
    schedule: Sequence[Sequence[ScheduleAction]],
    forward_seconds: Sequence[float],
    backward_seconds: Sequence[float],
    activation_bytes: Sequence[int],
    gradient_bytes: Sequence[int] | None = None,
    update_seconds: Sequence[float] | None = None,
    *,
    key: str = "s0",
    send_stream: str = MAIN,
) -> dict[str, list[Action]]:
    """Stage s on ``stage_devices[s]`` runs ``schedule[s]``; boundary b (between stages b and
    b+1) carries ``activation_bytes[b]`` forward and ``gradient_bytes[b]`` (default: the same)
    back. Messages are ``{key}/a{m}`` and ``{key}/g{m}`` as the stage workers name them.

    ``send_stream``: with the default, a stage's sends keep its main stream busy while they
    put their bytes (our shared-memory channel: the sending thread copies). Another stream
    name sends from there once the compute has signalled, the compute going on meanwhile
    (``send_async`` over Dask's comms).

    Examples
    --------
    >>> from collections import namedtuple
    >>> Step = namedtuple("Step", "kind microbatch")
    >>> schedule = [[Step("F", 0), Step("B", 0)]] * 2
    >>> programs = pipeline_programs(["a", "b"], schedule, [1.0, 1.0], [2.0, 2.0], [64])
    >>> [type(action).__name__ for action in programs["b"]]
    ['Recv', 'Compute', 'Compute', 'Send']
    """
    stages = len(stage_devices)
    if not len(schedule) == len(forward_seconds) == len(backward_seconds) == stages:
        raise ValueError(f"need a schedule, forward and backward seconds for each of {stages}")
    if len(activation_bytes) != stages - 1:
        raise ValueError(f"need activation bytes for each of the {stages - 1} stage boundaries")
    gradient_bytes = activation_bytes if gradient_bytes is None else gradient_bytes
    updates = [0.0] * stages if update_seconds is None else update_seconds
    programs: dict[str, list[Action]] = {}
    for stage, device in enumerate(stage_devices):
        before = stage_devices[stage - 1] if stage > 0 else None
        after = stage_devices[stage + 1] if stage < stages - 1 else None
        actions: list[Action] = []
        for step in schedule[stage]:
            m = step.microbatch
            if step.kind == "F":
                message, source, seconds = f"{key}/a{m}", before, forward_seconds[stage]
                target, nbytes = after, activation_bytes[stage] if after else 0
            elif step.kind == "B":
                message, source, seconds = f"{key}/g{m}", after, backward_seconds[stage]
                target, nbytes = before, gradient_bytes[stage - 1] if before else 0
            else:
                raise ValueError(f"stage {stage}: unknown schedule action kind {step.kind!r}")
            if source is not None:
                actions.append(Recv(source, message))
            actions.append(Compute(seconds, f"{step.kind}{m}"))
            if target is not None:
                actions += _send(target, nbytes, message, send_stream)
        if updates[stage] > 0:
            actions.append(Compute(updates[stage], "update", phase="update"))
        programs[device] = actions
    return programs


def _send(target: str, nbytes: int, message: str, stream: str) -> list[Action]:
    if stream == MAIN:
        return [Send(target, nbytes, message)]
    return [Signal(message), Wait(message, stream), Send(target, nbytes, message, stream=stream)]


def pipeline_bubble(timeline: Timeline, stage_devices: Sequence[str]) -> float:
    """Idle share of the stages' time as GPipe defines it (``workbench.events.summary.
    bubble_fraction`` on a measured run): 1 - compute time of all stages / (stages x the span
    from the first compute to the last). The update is left out, as the theory leaves it.

    Examples
    --------
    >>> from collections import namedtuple
    >>> from workbench.simulate.engine import simulate
    >>> from workbench.simulate.links import Link, uniform
    >>> Step = namedtuple("Step", "kind microbatch")
    >>> gpipe = [[Step("F", 0), Step("F", 1), Step("B", 1), Step("B", 0)]] * 2
    >>> programs = pipeline_programs(["a", "b"], gpipe, [1.0] * 2, [2.0] * 2, [0])
    >>> timeline = simulate(programs, uniform(Link(0.0, float("inf"))))
    >>> round(pipeline_bubble(timeline, ["a", "b"]), 4)  # (P-1)/(M+P-1)
    0.3333
    """
    span = timeline.span(stage_devices, "compute")
    if span is None or span[1] <= span[0]:
        raise ValueError("the stages computed nothing")
    computed = sum(timeline.busy(device, ("compute",)) for device in stage_devices)
    return 1.0 - computed / (len(stage_devices) * (span[1] - span[0]))


def peak_in_flight(timeline: Timeline, device: str) -> int:
    """The most micro-batches whose activations ``device`` held at once: forwards run minus
    backwards run, at its worst (what bounds a stage's activation memory).

    Examples
    --------
    >>> from workbench.simulate.timeline import Interval
    >>> runs = [("F0", 0.0), ("F1", 1.0), ("B0", 2.0), ("B1", 3.0)]
    >>> timeline = Timeline(
    ...     tuple(Interval("a", "main", "compute", l, t, t + 1, "compute") for l, t in runs),
    ...     {"a": 4.0},
    ... )
    >>> peak_in_flight(timeline, "a")
    2
    """
    held = peak = 0
    for interval in timeline.of(device, "compute"):
        held += {"F": 1, "B": -1}.get(interval.label[:1], 0)
        peak = max(peak, held)
    return peak
