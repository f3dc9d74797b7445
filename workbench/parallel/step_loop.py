"""The client's step loop for strategies whose devices keep their state between tasks.

Each round dispatches one task per participating device covering K steps (devices read any
step's batch from the sampler, so a task may cross an epoch boundary), waits for all of them
(failing with the device and step if one dies or stalls), and turns their reports into events:
phase intervals, the global loss, the learning rate and, where devices report them, staleness
and other named scalars (``"scalars"``: name, step, value, device or None); on GPUs also each
device's NVML utilization and memory.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from workbench.events import EventLog
from workbench.parallel.dispatch import submit_each, wait_all
from workbench.runtime.cluster import ClusterSession
from workbench.runtime.gpu_metrics import gpu_metrics
from workbench.training.job import Progress, TrainingJob, epoch_progress

# Steps per dispatched task: amortises Dask's per-task cost (docs/architecture.md, "What Dask
# costs").
STEPS_PER_TASK = 20


def drive_steps(
    session: ClusterSession,
    job: TrainingJob,
    log: EventLog,
    progress: Progress,
    strategy: str,
    function: Callable,
    arguments_for: Callable[[int, int], Sequence[tuple]],
    ranks: Sequence[int] | None = None,
    first: int | None = None,
    chunk_limit: Callable[[int], int | None] = lambda step: None,
    after_chunk: Callable[[int, int, list], None] = lambda first, step, results: None,
) -> None:
    """Run steps ``first`` (default ``job.first_step``) .. ``job.total_steps`` on the devices
    ``ranks``. A task stops short of ``chunk_limit(step)`` more steps (a checkpoint boundary);
    ``after_chunk(first, next step, results)`` runs once a round's events are logged."""
    step = job.first_step if first is None else first
    chunk_seconds = 60.0
    while step < job.total_steps:
        if job.stop.is_set():
            progress(f"[{strategy}] stopped at step {step}")
            return
        count = min(STEPS_PER_TASK, job.total_steps - step, chunk_limit(step) or STEPS_PER_TASK)
        started = job.clock()
        futures = submit_each(
            session, strategy, "step", step, function, arguments_for(step, count), ranks=ranks
        )
        results = wait_all(
            session,
            futures,
            "a step",
            step,
            deadline=job.config.stall_timeout + 10 * chunk_seconds,
            ranks=ranks,
        )
        chunk_seconds = max(job.clock() - started, 0.1)
        for result in results:
            for event in result["events"]:
                log.phase(*event)
            for current, staleness in result.get("staleness", ()):
                log.scalar("staleness", current, staleness, job.clock())
            # Other per-step figures a device reports, e.g. a replica's loss scale.
            for name, current, value, device in result.get("scalars", ()):
                log.scalar(name, current, value, job.clock(), device=device)
        for device, (utilization, memory) in gpu_metrics(session).items():
            log.scalar("gpu_utilization", step, utilization, job.clock(), device=device)
            log.scalar("gpu_memory_used", step, memory, job.clock(), device=device)
        for index in range(count):
            current = results[0]["losses"][index][0]
            # Equal shards of the batch: the mean of the reported losses is the global loss
            # (pipeline stages other than the last report none).
            reported = [r["losses"][index][1] for r in results]
            reported = [value for value in reported if value is not None]
            loss = sum(reported) / len(reported)

            log.scalar("loss", current, loss, job.clock())
            log.scalar("lr", current, job.schedule(current), job.clock())
            line = epoch_progress(job, current, loss, strategy)
            if line:
                progress(line)
        after_chunk(step, step + count, results)
        step += count
