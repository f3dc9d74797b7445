"""The client's step loop for strategies whose devices keep their state between tasks.

Each round dispatches one task per participating device covering K steps (devices read any
step's batch from the sampler, so a task may cross an epoch boundary; K grows with fast steps,
:func:`steps_per_round`), waits for all of them
(failing with the device and step if one dies or stalls), and turns their reports into events:
phase intervals, the global loss, the learning rate and, where devices report them, staleness
and other named scalars (``"scalars"``: name, step, value, device or None); on GPUs also each
device's NVML utilization and memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from workbench.parallel.dispatch import (
    DeviceFailure,
    InOrder,
    StoppedInFault,
    StopRequested,
    cancel_all,
    submit_each,
    wait_all,
)
from workbench.parallel.loop_run import NO_PAUSES, LoopRun, RoundHooks, StepTasks
from workbench.parallel.stop_gate import DevicesUnreachable, stop_devices
from workbench.runtime.cluster import ClusterSession
from workbench.runtime.gpu_metrics import gpu_metrics

# Steps per dispatched task, at least: amortises Dask's per-task cost (docs/architecture/
# dask-costs.md, "What Dask costs").
STEPS_PER_TASK = 20
# Fast steps get longer rounds, up to about this long and this many steps: each round's end
# costs the devices the handling of its results (the same page, "Rounds of steps").
ROUND_SECONDS = 0.5
MOST_STEPS_PER_TASK = 250
# After a Stop: how long the devices have to answer it, and to end the step in flight beyond
# twice its usual time; a device that does not is stalled (docs/architecture/faults.md, "Faults and
# stragglers").
STOP_ANSWER_S = 2.0
STOP_GRACE_S = 2.0


def steps_per_round(step_seconds: float | None, round_seconds: float = ROUND_SECONDS) -> int:
    """How many steps a round covers when a step takes ``step_seconds`` (None: not known
    yet): enough to last about ``round_seconds``, from :data:`STEPS_PER_TASK` to
    :data:`MOST_STEPS_PER_TASK`.

    Examples
    --------
    >>> steps_per_round(None), steps_per_round(0.1), steps_per_round(0.01), steps_per_round(1e-4)
    (20, 20, 50, 250)
    """
    if not step_seconds or step_seconds <= 0.0:
        return STEPS_PER_TASK
    return max(STEPS_PER_TASK, min(MOST_STEPS_PER_TASK, int(round_seconds / step_seconds)))


def drive_steps(
    session: ClusterSession,
    run: LoopRun,
    tasks: StepTasks,
    first: int,
    hooks: RoundHooks = NO_PAUSES,
    round_seconds: float = ROUND_SECONDS,
) -> None:
    """Run steps ``first`` .. ``run.total_steps`` as ``tasks``. A round covers
    :func:`steps_per_round` of the last round's step time and ``round_seconds`` (0: always
    :data:`STEPS_PER_TASK`), and stops short of ``hooks.steps_until_pause(step)`` more steps
    (a checkpoint boundary); ``hooks.after_round(first, next step, results)`` runs once a
    round's events are logged.

    The next round is sent before the current one finishes, each device's task queued on its
    worker behind its previous one (:mod:`workbench.parallel.ordered_tasks`), so a device goes
    from one task to the next without waiting for the client or the scheduler
    (docs/architecture/dask-costs.md, "What Dask costs"). Where ``hooks.pause_at(step)``
    (asked once, when the round ending at ``step`` is sent) is true, nothing is sent ahead:
    the devices stop at ``step`` and ``hooks.at_pause(step)`` may use them (a checkpoint's
    snapshot).

    A Stop (``run.stop``) reaches the devices while they run (:mod:`~workbench.parallel.
    stop_gate`): they end the step in flight, the rounds queued behind it run no step, and
    the steps that ran are logged. Devices that cannot end that step (stalled) raise
    :class:`~workbench.parallel.dispatch.StoppedInFault`.
    """
    step, ranks, name = first, tasks.ranks, run.name
    seconds = 60.0  # the last round's, from its sending to its results
    step_seconds: float | None = None  # the last round's, per step

    def send(start: int, after: _Round | None) -> _Round:
        size = steps_per_round(step_seconds, round_seconds)
        limit = hooks.steps_until_pause(start) or size
        count = min(size, run.total_steps - start, limit)
        arguments = tasks.arguments_for(start, count)
        # A device waits for its previous round at most as long as the client waits for one.
        order = InOrder(after.futures if after else (), run.stall_timeout + 10 * seconds)
        futures = submit_each(
            session, name, "step", start, tasks.function, arguments, ranks=ranks, in_order=order
        )
        return _Round(start, start + count, futures)

    in_flight: _Round | None = None
    while in_flight is not None or step < run.total_steps:
        if in_flight is None:
            if run.stop.is_set():
                run.progress(f"[{name}] stopped at step {step}")
                return
            in_flight = send(step, None)
        current, ahead = in_flight, None
        pause = hooks.pause_at(current.end)
        if not pause and current.end < run.total_steps and not run.stop.is_set():
            ahead = send(current.end, current)
        started = run.clock()
        try:
            # A round takes about as long as the last one: a stall is one that takes far longer.
            deadline = run.stall_timeout + 10 * seconds
            results = wait_all(
                session, current.futures, "a step", current.first, deadline, ranks, run.stop
            )
        except StopRequested:
            rounds = [round_ for round_ in (current, ahead) if round_ is not None]
            grace = STOP_GRACE_S + 2 * (step_seconds or 0.0)
            for round_, results in _stop_rounds(session, rounds, ranks, grace):
                ran = _steps_run(results)
                if ran:  # a round queued behind the stop step runs none
                    _log_round(session, run, round_, results)
                    hooks.after_round(round_.first, round_.first + ran, results)
                    step = round_.first + ran
            run.progress(f"[{name}] stopped at step {step}")
            return
        except BaseException:
            if ahead is not None:
                cancel_all(session, ahead.futures)
            raise
        seconds = max(run.clock() - started, 0.1)
        step_seconds = seconds / current.count
        _log_round(session, run, current, results)
        hooks.after_round(current.first, current.end, results)
        if pause:
            hooks.at_pause(current.end)
        step, in_flight = current.end, ahead


def _steps_run(results: list) -> int:
    """How many steps a round's tasks ran (fewer than sent once the run was stopped)."""
    return min((len(result["losses"]) for result in results), default=0)


def _stop_rounds(
    session: ClusterSession, rounds: list[_Round], ranks: Sequence[int] | None, grace: float
) -> list[tuple[_Round, list]]:
    """Stop the devices at the step in flight and wait for ``rounds`` (the one in flight and
    the one queued behind it) to come back with what ran; :class:`StoppedInFault` naming the
    device that did not answer or did not end its step within ``grace`` seconds."""
    ranks = list(range(len(session.addresses))) if ranks is None else list(ranks)
    addresses = [session.addresses[rank] for rank in ranks]
    futures = [future for round_ in rounds for future in round_.futures]
    try:
        stop_devices(session.client, session.run_id, addresses, STOP_ANSWER_S)
        # In order: a queued round starts once the round before it ended.
        return [
            (round_, wait_all(session, round_.futures, "a step", round_.first, grace, ranks))
            for round_ in rounds
        ]
    except (DevicesUnreachable, DeviceFailure) as problem:
        cancel_all(session, futures)
        reason = getattr(problem, "reason", None) or f"stalled: {problem}"
        step = getattr(problem, "step", None)
        raise StoppedInFault(
            f"stopped while a device was stalled: {problem}", step, reason
        ) from None


@dataclass(frozen=True)
class _Round:
    """One task per device, covering steps ``first`` .. ``end - 1``."""

    first: int
    end: int
    futures: list

    @property
    def count(self) -> int:
        return self.end - self.first


def _log_round(session: ClusterSession, run: LoopRun, round_: _Round, results: list) -> None:
    """A finished round's reports as events, and its progress lines."""
    log, clock = run.log, run.clock
    for result in results:
        for event in result["events"]:
            log.emit(event)
        for current, staleness in result.get("staleness", ()):
            log.scalar("staleness", current, staleness, clock())
        # Other per-step figures a device reports, e.g. a replica's loss scale.
        for name, current, value, device in result.get("scalars", ()):
            log.scalar(name, current, value, clock(), device=device)
    for device, (utilization, memory) in gpu_metrics(session).items():
        log.scalar("gpu_utilization", round_.first, utilization, clock(), device=device)
        log.scalar("gpu_memory_used", round_.first, memory, clock(), device=device)
    for index in range(_steps_run(results)):
        current = results[0]["losses"][index][0]
        # Equal shards of the batch: the mean of the reported losses is the global loss
        # (pipeline stages other than the last report none).
        reported = [r["losses"][index][1] for r in results]
        reported = [value for value in reported if value is not None]
        loss = sum(reported) / len(reported)

        log.scalar("loss", current, loss, clock())
        log.scalar("lr", current, run.learning_rate(current), clock())
        line = run.epoch_line(current, loss)
        if line:
            run.progress(line)
