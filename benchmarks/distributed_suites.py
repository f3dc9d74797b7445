"""What the distributed suites (``ddp``, ``allreduce``, ``overhead``) share: running the
workbench's own training loop and reading its figures from the event log.

A workbench contender is a real ``run_training`` call, exactly what ``dtrain run`` does: its
throughput is the summary's steady-state ``samples_per_second`` (the first 10% of the steps,
at most 20, excluded) and its time breakdown comes from the phase events every device reports
(``compute``, ``allreduce``, ``update``): the same events the UI and the run summary read.

``one-device`` trains inside the calling process, so it runs in a spawned worker process of its
own (:class:`~benchmarks.timing.ProcessContender`: one BLAS thread, glibc's malloc
thresholds fixed as in every benchmark process). Multi-device strategies run from this process:
their devices are Dask worker processes started with the same thread count and malloc
thresholds (``workbench/runtime/cluster.py``), and this process only dispatches.
"""

from __future__ import annotations

import functools
import os
import statistics
import tempfile
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from benchmarks.timing import ProcessContender, Spread

PHASE_NAMES = ("compute", "allreduce", "update")


def spread(values: Sequence[float], scale: float = 1.0) -> dict[str, float]:
    """``{median, min, q1, q3, max}`` of ``values`` (times ``scale``)."""
    return Spread(tuple(values)).summary(scale=scale)


def phase_breakdown(log: Any, global_batch: int, samples_per_second: float) -> dict[str, float]:
    """Milliseconds per step, from the event log's steady steps (the summary's warm-up excluded).

    ``step``: the global batch over the summary's samples/s. Means over every device and
    steady step (absent phases read 0): ``compute`` (forward and backward; one-device's phase
    is the whole step), ``allreduce`` (what follows the compute phase until the averaged
    gradients are there: the exposed all-reduce, including waiting for the slower device),
    ``allreduce_total`` (the whole all-reduce phase, which may start inside the backward pass
    when buckets overlap with it), ``update``. ``other``: ``step`` minus compute, exposed
    all-reduce and update, the time no phase accounts for (dispatching tasks, the step loop).
    ``skew``: the median over steps of the spread of the devices' compute end times, how long
    the first device to finish waits for the last (0 with one device).
    """
    from workbench.events.summary import warmup_steps

    phases = log.phases()
    steps = sorted({event.step for event in phases})
    steady = set(steps[warmup_steps(len(steps)) :])
    by_device_step: dict[tuple[str, int], dict[str, Any]] = defaultdict(dict)
    for event in phases:
        if event.step in steady:
            by_device_step[event.device, event.step][event.phase] = event
    totals: dict[str, float] = defaultdict(float)
    compute_ends: dict[int, list[float]] = defaultdict(list)
    for (_, step), events in by_device_step.items():
        compute, reduce = events.get("compute"), events.get("allreduce")
        for name, event in events.items():
            totals[name] += event.duration
        if compute is not None:
            compute_ends[step].append(compute.end)
        if reduce is not None:
            after = max(reduce.start, compute.end) if compute is not None else reduce.start
            totals["exposed"] += max(reduce.end - after, 0.0)
    count = max(len(by_device_step), 1)
    step_ms = 1e3 * global_batch / samples_per_second if samples_per_second > 0 else 0.0
    figures = {
        "step": step_ms,
        "compute": 1e3 * totals["compute"] / count,
        "allreduce": 1e3 * totals["exposed"] / count,
        "allreduce_total": 1e3 * totals["allreduce"] / count,
        "update": 1e3 * totals["update"] / count,
    }
    figures["other"] = step_ms - sum(figures[name] for name in PHASE_NAMES)
    skews = [max(ends) - min(ends) for ends in compute_ends.values() if len(ends) > 1]
    figures["skew"] = 1e3 * statistics.median(skews) if skews else 0.0
    return figures


def train(config: dict[str, Any]) -> dict[str, Any]:
    """One ``run_training`` with ``RunConfig(**config)``: its throughput, step-time breakdown
    (:func:`phase_breakdown`), loss, traffic and wall time."""
    from workbench.config import RunConfig
    from workbench.launch.runner import run_training

    config = {**config, "hidden": tuple(config["hidden"])}
    result = run_training(RunConfig(**config), progress=lambda line: None)
    summary = result.summary
    rate = summary["samples_per_second"]
    return {
        "samples_per_second": rate,
        "phases_ms": phase_breakdown(result.log, summary["global_batch_size"], rate),
        "final_loss": summary["final_loss"],
        "bytes_communicated": summary["bytes_communicated"],
        "wall_seconds": summary["wall_seconds"],
        "steady_steps": summary["steps"] - summary["warmup_steps_excluded"],
    }


class TrainingRun:
    """``train(config)`` as a :class:`ProcessContender` target: ``run()`` trains once."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config

    def run(self) -> dict[str, Any]:
        return train(self.config)

    def synchronize(self) -> None:
        return None


class Trainer:
    """Runs workbench trainings: in a worker process of its own for ``one-device`` (it
    computes in the calling process), from this process otherwise (the devices are Dask
    workers). Use as a context manager; the worker process is started on first use."""

    def __init__(self, threads: int = 1) -> None:
        self.threads = threads
        self._workers: dict[str, ProcessContender] = {}

    def __call__(self, config: dict[str, Any]) -> dict[str, Any]:
        if config["strategy"] != "one-device":
            return train(config)
        key = repr(sorted(config.items()))
        if key not in self._workers:
            factory = functools.partial(TrainingRun, config)
            name = f"one-device-{len(self._workers)}"
            self._workers[key] = ProcessContender(name, factory, self.threads).ready()
        return self._workers[key].call("run")

    def close(self) -> None:
        for worker in self._workers.values():
            worker.close()
        self._workers.clear()

    def __enter__(self) -> Trainer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def workbench_config(
    strategy: str,
    devices: int,
    dataset: str,
    hidden: Sequence[int],
    batch_size: int,
    steps: int,
    learning_rate: float,
    seed: int,
) -> dict[str, Any]:
    """The ``RunConfig`` fields of a benchmark run: plain SGD at a constant rate, float32,
    ring all-reduce where there is one, on the CPU (a ``dict``, so it pickles to a worker
    process)."""
    ring = {"allreduce": "ring"} if strategy == "mirrored" else {}
    return {
        "strategy": strategy,
        "devices": devices,
        "dataset": dataset,
        "hidden": list(hidden),
        "batch_size": batch_size,
        "steps": steps,
        "lr": learning_rate,
        "optimizer": "sgd",
        "lr_decay": "none",
        "dtype": "float32",
        "device_type": "cpu",
        "seed": seed,
        **ring,
    }


@contextmanager
def own_run_store() -> Iterator[None]:
    """A run store of its own for one run (nothing cached: the run calibrates afresh, as the
    first run on a cluster does)."""
    from workbench.store import STORE_ENVIRONMENT

    previous = os.environ.get(STORE_ENVIRONMENT)
    with tempfile.TemporaryDirectory(prefix="dtrain-bench-store-") as folder:
        os.environ[STORE_ENVIRONMENT] = folder
        try:
            yield
        finally:
            if previous is None:
                os.environ.pop(STORE_ENVIRONMENT, None)
            else:
                os.environ[STORE_ENVIRONMENT] = previous
