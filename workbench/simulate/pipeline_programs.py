"""Programs for one pipeline-parallel step, and what its timeline says about the pipeline.

Each device plays its schedule's actions in order, as ``workbench/parallel/pipeline/
stage_worker.py`` does: a forward of micro-batch m receives the activation from the previous
model chunk (blocking, right before computing), computes, and sends its output to the next
chunk; a backward (``B``, or its input-gradient half ``I``) receives the output gradient from
the next chunk, computes (the real backward recomputes its forward: pass that in
``backward_seconds``) and sends the input gradient back; a weight-gradient half ``W`` only
computes. The first chunk reads its input from the data, the last computes the loss itself.
After the last action the device applies its optimizer update.

With virtual stages the model is cut into ``V x P`` chunks, device s holding model chunks
``s, s + P, ...`` (an action's ``chunk`` is that local index, as
``workbench.parallel.pipeline.schedules`` numbers them); costs and boundary bytes are given
per model chunk. The schedule is taken as per-device action lists (objects with ``.kind`` "F",
"B", "I" or "W", ``.microbatch`` and optionally ``.chunk``), so this package does not depend on
the pipeline code.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from workbench.simulate.programs import MAIN, Action, Compute, Recv, Send, Signal, Wait
from workbench.simulate.timeline import Timeline


class ScheduleAction(Protocol):
    @property
    def kind(self) -> str: ...  # "F", "B", "I" or "W"

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
    input_grad_seconds: Sequence[float] | None = None,
    weight_grad_seconds: Sequence[float] | None = None,
    input_grad_ready_seconds: Sequence[float] | None = None,
) -> dict[str, list[Action]]:
    """Device s on ``stage_devices[s]`` runs ``schedule[s]``. Costs are per model chunk k
    (``V x P`` of them, V the virtual stages; one per device without): ``forward_seconds``,
    ``backward_seconds`` and, for split backwards, ``input_grad_seconds`` and
    ``weight_grad_seconds`` (default: half the backward each). Boundary b (between model
    chunks b and b+1) carries ``activation_bytes[b]`` forward and ``gradient_bytes[b]``
    (default: the same) back; ``update_seconds`` is per device. Messages are ``{key}/a{m}``
    and ``{key}/g{m}`` as the stage workers name them, with ``@b`` after them for boundary b
    when there are virtual stages. Chunks on the same device hand over without a message.

    ``send_stream``: with the default, a device's sends keep its main stream busy while they
    put their bytes (our shared-memory channel: the sending thread copies). Another stream
    name sends from there once the compute has signalled, the compute going on meanwhile
    (``send_async`` over Dask's comms).

    ``input_grad_ready_seconds`` (per model chunk): how far into a whole backward ``B`` its
    input gradient is computed. The stage workers send it back right then, before the weight
    gradients that follow it, so a ``B`` computes that long, sends, then computes the rest
    (two compute intervals under one label). Without it the input gradient goes after the
    whole backward.

    Examples
    --------
    >>> from collections import namedtuple
    >>> Step = namedtuple("Step", "kind microbatch")
    >>> schedule = [[Step("F", 0), Step("B", 0)]] * 2
    >>> programs = pipeline_programs(["a", "b"], schedule, [1.0, 1.0], [2.0, 2.0], [64])
    >>> [type(action).__name__ for action in programs["b"]]
    ['Recv', 'Compute', 'Compute', 'Send']
    """
    devices = len(stage_devices)
    chunks = len(forward_seconds)
    if (
        len(schedule) != devices
        or len(backward_seconds) != chunks
        or chunks < devices
        or chunks % devices
    ):
        raise ValueError(
            f"need a schedule for each of {devices} devices, and forward and backward seconds "
            "for each model chunk (a multiple of the devices)"
        )
    if len(activation_bytes) != chunks - 1:
        raise ValueError(f"need activation bytes for each of the {chunks - 1} stage boundaries")
    gradient_bytes = activation_bytes if gradient_bytes is None else gradient_bytes
    updates = [0.0] * devices if update_seconds is None else update_seconds
    halves = [b / 2 for b in backward_seconds]
    seconds = {
        "F": forward_seconds,
        "B": backward_seconds,
        "I": halves if input_grad_seconds is None else input_grad_seconds,
        "W": halves if weight_grad_seconds is None else weight_grad_seconds,
    }

    def message(kind: str, m: int, boundary: int) -> str:
        return f"{key}/{kind}{m}" + (f"@{boundary}" if chunks > devices else "")

    programs: dict[str, list[Action]] = {}
    for stage, device in enumerate(stage_devices):
        actions: list[Action] = []
        for step in schedule[stage]:
            m, chunk = step.microbatch, getattr(step, "chunk", 0)
            k = chunk * devices + stage
            if step.kind not in seconds:
                raise ValueError(f"stage {stage}: unknown schedule action kind {step.kind!r}")
            source = target = None
            if step.kind == "F":
                if k > 0:
                    source = (stage_devices[(k - 1) % devices], message("a", m, k - 1))
                if k < chunks - 1:
                    target = (stage_devices[(k + 1) % devices], message("a", m, k))
                    nbytes = activation_bytes[k]
            elif step.kind in ("B", "I"):
                if k < chunks - 1:
                    source = (stage_devices[(k + 1) % devices], message("g", m, k))
                if k > 0:
                    target = (stage_devices[(k - 1) % devices], message("g", m, k - 1))
                    nbytes = gradient_bytes[k - 1]
            if source is not None and source[0] != device:
                actions.append(Recv(*source))
            label = f"{step.kind}{m}" + (f"@{chunk}" if chunk else "")
            total = seconds[step.kind][k]
            remote = target if target is not None and target[0] != device else None
            if remote is not None and step.kind == "B" and input_grad_ready_seconds is not None:
                ready = min(input_grad_ready_seconds[k], total)
                actions.append(Compute(ready, label))
                actions += _send(remote[0], nbytes, remote[1], send_stream)
                actions.append(Compute(total - ready, label))
                continue
            actions.append(Compute(total, label))
            if remote is not None:
                actions += _send(remote[0], nbytes, remote[1], send_stream)
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
    backwards run (a split backward's ``W``, which still reads the stored input), at its worst
    (what bounds a stage's activation memory).

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
    previous = None
    for interval in timeline.of(device, "compute"):
        # A backward cut by the early send of its input gradient is two intervals: one action.
        if interval.label != previous:
            held += {"F": 1, "B": -1, "W": -1}.get(interval.label[:1], 0)
        previous = interval.label
        peak = max(peak, held)
    return peak
