"""The ``faults`` suite: what a killed worker and a slow one cost, on local clusters the runs
start themselves.

1. Recovery. ``mirrored`` on 2 devices (float64) trains with a checkpoint every few steps; once
   the logged loss passes ``kill_at`` a thread SIGKILLs one of the run's Dask worker processes
   (a ``spawn_main`` child of this process that was not there before the run) amid the next
   task's steps (:class:`WorkerKiller`: not while a checkpoint is gathered, where a dead
   worker is noticed only when the gather's bound runs out, minutes later). The run notices,
   restarts every worker and restores every device from the last checkpoint
   (``workbench/parallel/device_run.py``). Reported: the engine's ``recovery_seconds`` (failure
   noticed -> first step after the restore), how long the failure took to notice (kill ->
   ``failure`` event) and their sum (kill -> first step after the restore), and the wall time
   of the same run with and without the kill, in alternating order. The final parameters of a
   killed run must equal the uninterrupted run's bit for bit (``bit_identical``): the restore
   replays the same batches from the same state.
2. Backup workers. ``parameter-server`` sync on 3 workers whose ``task:1`` computes 3 times as
   long (``--simulate-straggler``), with one backup worker against none, alternating. A step
   with a backup applies the first N-B gradients and drops the late one, so it does not wait for
   the straggler; the summary's samples/s counts the whole global batch of each step, the
   "applied" samples/s only the (N-B)/N of it whose gradients were used. Big slices (compute
   outweighs pulls and pushes) so the straggler's slowness is what a step waits for.
3. Async straggler. ``parameter-server`` async on 2 workers, ``task:1`` 3 times as slow: the fast
   worker does not wait, so it applies about 3 times as many updates (``per_device[i].updates``).

Every run is a real ``run_training`` call from this process, as ``dtrain run`` makes; the
devices are Dask worker processes (one BLAS thread each, ``workbench/runtime/cluster.py``).
"""

from __future__ import annotations

import argparse
import re
import signal
import threading
import time
from collections.abc import Set as AbstractSet
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import psutil

from benchmarks.distributed_suites import spread
from benchmarks.flags import Flag, add_settings_flags, positive, positive_list, settings_from
from benchmarks.report import span, table, widths
from benchmarks.suite import Progress, SettingsError, SuiteFailed


class FaultNotInjected(SuiteFailed):
    """The run ended without the kill the suite asked for (or recovered other than once), so
    its figures are not those of a recovery."""


@dataclass(frozen=True)
class FaultsSettings:
    dataset: str = "digits"
    hidden: tuple[int, ...] = (512, 512)
    # 1. Recovery: mirrored, 2 devices, float64.
    recovery_steps: int = 300
    recovery_batch_size: int = 64
    checkpoint_every: int = 20
    kill_at: int | None = None  # the loss's step that triggers the kill; None: half the steps
    # 2. Backup workers: parameter-server sync, 3 workers, float32.
    backup_steps: int = 100
    backup_batch_size: int = 1200
    backup_devices: int = 3
    backups: int = 1
    # 3. Async straggler: parameter-server async, 2 workers, float32.
    async_steps: int = 200
    async_batch_size: int = 1024
    async_devices: int = 2
    straggler: str = "task:1=3"
    repeats: int = 3
    seed: int = 0

    @property
    def kill_step(self) -> int:
        return self.kill_at if self.kill_at is not None else self.recovery_steps // 2


def worker_processes(exclude: AbstractSet[int] = frozenset()) -> list[psutil.Process]:
    """Dask worker processes of this process's local clusters (children spawned by their
    nannies: ``spawn_main`` in the command line), except the pids in ``exclude``, by pid."""
    found = []
    for process in psutil.Process().children(recursive=True):
        try:
            if process.pid not in exclude and "spawn_main" in " ".join(process.cmdline()):
                found.append(process)
        except psutil.Error:  # gone meanwhile
            continue
    return sorted(found, key=lambda process: process.pid)


class WorkerKiller:
    """SIGKILLs one of the run's worker processes amid the steps after its logged loss reached
    ``step``.

    Losses reach the client a task's worth of steps at a time, just before it gathers a
    checkpoint, so a kill at that moment would hit the gather rather than a step; the kill
    waits half the time between the last two arrivals of losses, which puts it in the middle
    of the next task's steps. The run's workers are the ``spawn_main`` children that were not
    there when this was made; ``victim`` picks one of them by pid order (modulo their number).
    ``killed_at``: the time of the kill (``time.time()``), None until then."""

    def __init__(self, log: Any, step: int, victim: int = 0, timeout: float = 300.0) -> None:
        self.log, self.step, self.victim, self.timeout = log, step, victim, timeout
        self.before = {process.pid for process in worker_processes()}
        self.killed_at: float | None = None
        self.killed_pid: int | None = None
        self.delay: float | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="dtrain-bench-kill", daemon=True)

    @staticmethod
    def arrival_interval(times: list[float], gap: float = 0.005) -> float:
        """Seconds between the last two bursts of ``times`` (the log times of the losses; a
        burst's are logged within ``gap`` of each other), 0 with one burst.

        Examples
        --------
        >>> WorkerKiller.arrival_interval([1.0, 1.001, 1.3, 1.3005, 1.301])
        0.3
        >>> WorkerKiller.arrival_interval([1.0, 1.001])
        0.0
        """
        starts: list[float] = []  # the first time of each burst
        last: float | None = None
        for moment in sorted(times):
            if last is None or moment - last > gap:
                starts.append(moment)
            last = moment
        return round(starts[-1] - starts[-2], 9) if len(starts) > 1 else 0.0

    def _watch(self) -> None:
        deadline = time.monotonic() + self.timeout
        while not self._done.is_set() and time.monotonic() < deadline:
            losses = self.log.scalars("loss")
            if losses and losses[-1].step >= self.step:
                self.delay = 0.5 * self.arrival_interval([event.time for event in losses])
                if self._done.wait(self.delay):
                    return  # the run ended meanwhile
                workers = worker_processes(self.before)
                if workers:
                    target = workers[self.victim % len(workers)]
                    self.killed_at = time.time()
                    try:
                        target.send_signal(signal.SIGKILL)
                        self.killed_pid = target.pid
                    except psutil.Error:
                        self.killed_at = None
                return
            time.sleep(0.01)

    def __enter__(self) -> WorkerKiller:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._done.set()
        self._thread.join(timeout=10)


def _train(config: Any, log: Any = None, job_hook: Any = None, lines: list | None = None) -> Any:
    """One ``run_training`` from this process; its progress lines go to ``lines`` if given."""
    from workbench.events import EventLog
    from workbench.launch.runner import run_training

    progress = lines.append if lines is not None else (lambda line: None)
    return run_training(config, log=log or EventLog(), progress=progress, job_hook=job_hook)


# --- 1. Recovery ---------------------------------------------------------------------------


def _recovery_config(settings: FaultsSettings) -> Any:
    from workbench.config import RunConfig

    return RunConfig(
        strategy="mirrored",
        devices=2,
        dataset=settings.dataset,
        hidden=settings.hidden,
        dtype="float64",
        batch_size=settings.recovery_batch_size,
        steps=settings.recovery_steps,
        checkpoint_every=settings.checkpoint_every,
        lr_decay="none",
        seed=settings.seed,
    )


def _clean_run(config: Any) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    result = _train(config)
    summary = result.summary
    if summary["restarts"] != 0:
        raise FaultNotInjected(f"the uninterrupted run restarted {summary['restarts']} times")
    return {"wall_seconds": summary["wall_seconds"], "final_loss": summary["final_loss"]}, (
        result.parameters
    )


def _killed_run(
    config: Any, kill_at: int, victim: int
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    from workbench.events import EventLog

    log = EventLog()
    jobs: list[Any] = []  # the training jobs, as the run hands them over
    lines: list[str] = []
    with WorkerKiller(log, kill_at, victim) as killer:
        result = _train(config, log, job_hook=jobs.append, lines=lines)
    summary = result.summary
    if killer.killed_at is None:
        raise FaultNotInjected(
            f"the run ended before its loss reached step {kill_at}, so no worker was killed: "
            "give it more steps (--fault-steps) or an earlier --kill-at"
        )
    if summary["restarts"] != 1 or len(summary["recovery_seconds"]) != 1:
        raise FaultNotInjected(
            f"one worker was killed but the run restarted {summary['restarts']} times with "
            f"recovery times {summary['recovery_seconds']}"
        )
    killed = killer.killed_at - jobs[0].clock_origin  # on the run's clock
    noticed = min(e.start for e in log.phases() if e.phase == "failure")
    resumed = max(e.end for e in log.phases() if e.phase == "recovery")
    figures = {
        "wall_seconds": summary["wall_seconds"],
        "final_loss": summary["final_loss"],
        "restarts": summary["restarts"],
        "steps_recomputed": summary["steps_recomputed"],
        "recovery_seconds": summary["recovery_seconds"][0],
        "detect_seconds": noticed - killed,
        "kill_to_resume_seconds": resumed - killed,
        "killed_pid": killer.killed_pid,
        "kill_delay_seconds": killer.delay,
        # What the run said about the failure (e.g. "... died during a step at step 160 ...").
        "failure": next((line for line in lines if "restoring every device" in line), None),
        "failed_at_step": min(e.step for e in log.phases() if e.phase == "failure"),
        "restored_from_step": min(e.step for e in log.phases() if e.phase == "recovery"),
    }
    return figures, result.parameters


def _same_bits(left: dict[str, np.ndarray], right: dict[str, np.ndarray]) -> bool:
    return left.keys() == right.keys() and all(
        left[name].dtype == right[name].dtype and np.array_equal(left[name], right[name])
        for name in left
    )


def run_recovery(settings: FaultsSettings, progress: Progress) -> dict[str, Any]:
    config = _recovery_config(settings)
    kill_at = settings.kill_step
    clean_runs: list[dict[str, Any]] = []
    killed_runs: list[dict[str, Any]] = []
    reference: dict[str, np.ndarray] | None = None
    identical: list[bool] = []
    # Untimed: the first cluster a process starts is slower (the client's first imports and
    # connections), which would make the first uninterrupted run look slow.
    progress("recovery: warm-up run (untimed)")
    _train(config.replace(steps=min(settings.checkpoint_every, settings.recovery_steps)))
    for index in range(settings.repeats):
        order = ("clean", "killed") if index % 2 == 0 else ("killed", "clean")
        parameters: dict[str, dict[str, np.ndarray]] = {}
        for kind in order:
            progress(f"recovery: repeat {index + 1}/{settings.repeats}, {kind}")
            if kind == "clean":
                figures, parameters[kind] = _clean_run(config)
                clean_runs.append(figures)
                progress(f"  wall {figures['wall_seconds']:.2f} s")
            else:
                figures, parameters[kind] = _killed_run(config, kill_at, victim=index)
                killed_runs.append(figures)
                progress(
                    f"  wall {figures['wall_seconds']:.2f} s, recovery "
                    f"{figures['recovery_seconds']:.2f} s (kill -> resumed "
                    f"{figures['kill_to_resume_seconds']:.2f} s)"
                )
        reference = reference if reference is not None else parameters["clean"]
        # The killed run against its uninterrupted twin, and every run against the first.
        identical.append(
            _same_bits(parameters["killed"], parameters["clean"])
            and _same_bits(parameters["clean"], reference)
        )
    return {
        "strategy": "mirrored",
        "devices": 2,
        "dtype": "float64",
        "kill_at": kill_at,
        "recovery_seconds": spread([run["recovery_seconds"] for run in killed_runs]),
        "detect_seconds": spread([run["detect_seconds"] for run in killed_runs]),
        "kill_to_resume_seconds": spread([run["kill_to_resume_seconds"] for run in killed_runs]),
        "clean_wall_seconds": spread([run["wall_seconds"] for run in clean_runs]),
        "killed_wall_seconds": spread([run["wall_seconds"] for run in killed_runs]),
        "extra_wall_seconds": spread(
            [k["wall_seconds"] - c["wall_seconds"] for k, c in zip(killed_runs, clean_runs)]
        ),
        "steps_recomputed": [run["steps_recomputed"] for run in killed_runs],
        "bit_identical": all(identical),
        "bit_identical_per_repeat": identical,
        "runs": {"clean": clean_runs, "killed": killed_runs},
    }


# --- 2. Backup workers ---------------------------------------------------------------------


def _parameter_server_config(
    settings: FaultsSettings, mode: str, devices: int, batch: int, steps: int, backups: int = 0
) -> Any:
    from workbench.config import RunConfig

    extra = {"backup_workers": backups} if mode == "sync" else {}
    return RunConfig(
        strategy="parameter-server",
        devices=devices,
        ps=1,
        mode=mode,
        dataset=settings.dataset,
        hidden=settings.hidden,
        dtype="float32",
        batch_size=batch,
        steps=steps,
        simulate_straggler=(settings.straggler,),
        seed=settings.seed,
        **extra,
    )


def _parameter_server_run(config: Any, workers: int, backups: int) -> dict[str, Any]:
    summary = _train(config).summary
    rate = summary["samples_per_second"]
    return {
        "samples_per_second": rate,
        # Only the first N-B gradients of a step were applied.
        "applied_samples_per_second": rate * (workers - backups) / workers,
        "test_accuracy": summary["test_accuracy"],
        "final_loss": summary["final_loss"],
        "wall_seconds": summary["wall_seconds"],
        "dropped_gradients": summary.get("dropped_gradients", 0),
        "updates": [entry.get("updates", 0) for entry in summary["per_device"][:workers]],
        "staleness_max": summary.get("staleness", {}).get("max"),
    }


def run_backup(settings: FaultsSettings, progress: Progress) -> dict[str, Any]:
    workers, backups = settings.backup_devices, settings.backups
    runs: dict[int, list[dict[str, Any]]] = {0: [], backups: []}
    for index in range(settings.repeats):
        order = (0, backups) if index % 2 == 0 else (backups, 0)
        for count in order:
            progress(f"backup workers: repeat {index + 1}/{settings.repeats}, {count} backup(s)")
            config = _parameter_server_config(
                settings, "sync", workers, settings.backup_batch_size, settings.backup_steps, count
            )
            runs[count].append(_parameter_server_run(config, workers, count))
            run = runs[count][-1]
            progress(
                f"  {run['samples_per_second']:,.0f} samples/s, accuracy "
                f"{run['test_accuracy']:.4f}, dropped {run['dropped_gradients']}"
            )

    def row(count: int) -> dict[str, Any]:
        done = runs[count]
        return {
            "backup_workers": count,
            "samples_per_second": spread([r["samples_per_second"] for r in done]),
            "applied_samples_per_second": spread([r["applied_samples_per_second"] for r in done]),
            "test_accuracy": spread([r["test_accuracy"] for r in done]),
            "dropped_gradients": spread([r["dropped_gradients"] for r in done]),
            "runs": done,
        }

    def ratios(key: str) -> dict[str, float]:
        # Round by round: the two runs of a repeat ran seconds apart.
        return spread([b[key] / n[key] for b, n in zip(runs[backups], runs[0])])

    return {
        "workers": workers,
        "backups": backups,
        "rows": [row(0), row(backups)],
        "samples_per_second_ratio": ratios("samples_per_second"),
        "applied_samples_per_second_ratio": ratios("applied_samples_per_second"),
    }


# --- 3. Async straggler --------------------------------------------------------------------


def run_async(settings: FaultsSettings, progress: Progress) -> dict[str, Any]:
    workers = settings.async_devices
    runs = []
    for index in range(settings.repeats):
        progress(f"async straggler: repeat {index + 1}/{settings.repeats}")
        config = _parameter_server_config(
            settings, "async", workers, settings.async_batch_size, settings.async_steps
        )
        runs.append(_parameter_server_run(config, workers, 0))
        progress(f"  updates per worker {runs[-1]['updates']}")
    straggler = settings.straggler.partition("=")[0]
    slow = int(straggler.rpartition(":")[2]) if straggler.startswith("task:") else workers - 1
    fast = [rank for rank in range(workers) if rank != slow]
    return {
        "workers": workers,
        "straggler_task": slow,
        "updates": [spread([run["updates"][rank] for run in runs]) for rank in range(workers)],
        # The fastest other worker's updates over the straggler's, run by run.
        "fast_over_slow_updates": spread(
            [max(run["updates"][r] for r in fast) / max(run["updates"][slow], 1) for run in runs]
        ),
        "samples_per_second": spread([run["samples_per_second"] for run in runs]),
        "test_accuracy": spread([run["test_accuracy"] for run in runs]),
        "staleness_max": max((run["staleness_max"] or 0) for run in runs),
        "runs": runs,
    }


# --- The suite -----------------------------------------------------------------------------


def run_faults_suite(settings: FaultsSettings, progress: Progress) -> dict[str, Any]:
    factor = float(settings.straggler.partition("=")[2])
    return {
        "suite": "faults",
        "settings": {**asdict(settings), "kill_at": settings.kill_step, "factor": factor},
        "recovery": run_recovery(settings, progress),
        "backup": run_backup(settings, progress),
        "async": run_async(settings, progress),
    }


def _three_steps(text: str) -> tuple[int, ...]:
    counts = positive_list(text)
    if len(counts) != 3:
        raise argparse.ArgumentTypeError(
            f"expected three step counts RECOVERY,BACKUP,ASYNC like 300,100,200, got {text!r}"
        )
    return counts


def add_flags(parser: argparse.ArgumentParser) -> None:
    defaults = FaultsSettings()
    add_settings_flags(
        parser,
        defaults,
        ("hidden", "repeats", "seed"),
        checkpoint_every=Flag(
            ("--checkpoint-every",), "recovery run: steps between checkpoints", positive
        ),
        kill_at=Flag(
            ("--kill-at",),
            "recovery run: kill a worker once the loss passed this step (half the steps)",
            positive,
        ),
    )
    steps = (defaults.recovery_steps, defaults.backup_steps, defaults.async_steps)
    parser.add_argument(
        "--fault-steps",
        type=_three_steps,
        default=steps,
        metavar="RECOVERY,BACKUP,ASYNC",
        help="steps of the recovery, backup-worker and async-straggler runs "
        f"({','.join(map(str, steps))})",
    )


def run(args: argparse.Namespace, progress: Progress) -> dict[str, Any]:
    recovery, backup, asynchronous = args.fault_steps
    settings = replace(
        settings_from(FaultsSettings, args),
        recovery_steps=recovery,
        backup_steps=backup,
        async_steps=asynchronous,
    )
    if settings.kill_step >= settings.recovery_steps:
        raise SettingsError(
            f"--kill-at {settings.kill_step} is not before the run's last step "
            f"({settings.recovery_steps} steps)"
        )
    return run_faults_suite(settings, progress)


def _failure_phrase(line: str | None) -> str:
    """``"... died during a step at step 160 (its worker ...)"`` -> ``"died during a step at
    step 160"``; the line as it is when it reads otherwise.

    Examples
    --------
    >>> _failure_phrase("[mirrored] /job:worker/task:0 died during a step at step 160 (its "
    ...                 "worker left); restoring every device from the checkpoint at step 160")
    'died during a step at step 160'
    """
    if line is None:
        return "not reported"
    found = re.search(r"(died|failed|did not finish) .*? at step \d+", line)
    return found.group(0) if found else line


def _seconds(figures: dict[str, float]) -> str:
    return f"{figures['min']:.2f} s - {figures['max']:.2f} s"


BACKUP_COLUMNS = ("backup workers", "samples/s (median)", "min - max", "applied samples/s")


def render(result: dict[str, Any]) -> str:
    settings = result["settings"]
    hidden = widths(settings["hidden"])
    factor = f"{settings['factor']:g}"
    recovery, backup, asynchronous = result["recovery"], result["backup"], result["async"]
    clean, killed = recovery["clean_wall_seconds"], recovery["killed_wall_seconds"]
    identical = recovery["bit_identical"]
    lines = [
        f"### faults: recovery from a killed worker, backup workers and stragglers (MLP {hidden}"
        f" on {settings['dataset']})",
        "",
        f"**Recovery**: mirrored, 2 devices, float64, batch {settings['recovery_batch_size']}, "
        f"{settings['recovery_steps']} steps, a checkpoint every {settings['checkpoint_every']} "
        f"steps; one worker process SIGKILLed amid the steps after the loss passed step "
        f"{recovery['kill_at']} (half a task's time later, so the kill hits a step, not the "
        "checkpoint's gather).",
        "",
        *table(("figure", "median", "min - max"), "lrr"),
        f"| recovery_seconds (failure noticed -> first step after the restore) | "
        f"**{recovery['recovery_seconds']['median']:.2f} s** | "
        f"{_seconds(recovery['recovery_seconds'])} |",
        f"| kill -> failure noticed | {recovery['detect_seconds']['median']:.2f} s | "
        f"{_seconds(recovery['detect_seconds'])} |",
        f"| kill -> first step after the restore | "
        f"{recovery['kill_to_resume_seconds']['median']:.2f} s | "
        f"{_seconds(recovery['kill_to_resume_seconds'])} |",
        f"| wall time, uninterrupted | {clean['median']:.2f} s | {_seconds(clean)} |",
        f"| wall time, one worker killed | {killed['median']:.2f} s | {_seconds(killed)} |",
        f"| extra wall time of the kill | {recovery['extra_wall_seconds']['median']:.2f} s | "
        f"{_seconds(recovery['extra_wall_seconds'])} |",
        "",
        f"- final parameters equal the uninterrupted run's bit for bit: "
        f"**{'yes' if identical else 'NO'}** "
        f"({sum(recovery['bit_identical_per_repeat'])} of "
        f"{len(recovery['bit_identical_per_repeat'])} repeats); steps recomputed per killed "
        f"run: {', '.join(map(str, recovery['steps_recomputed']))}",
        "- failures as the runs noticed them: "
        + "; ".join(_failure_phrase(run["failure"]) for run in recovery["runs"]["killed"]),
        "",
        f"**Backup workers**: parameter server, sync, {backup['workers']} workers and 1 shard, "
        f"task:1 computes {factor}x as long; float32, batch {settings['backup_batch_size']}, "
        f"{settings['backup_steps']} steps.",
        "",
        *table(
            (*BACKUP_COLUMNS, "test accuracy", "dropped gradients"),
            "rrrrrr",
            [
                (
                    row["backup_workers"],
                    f"{row['samples_per_second']['median']:,.0f}",
                    f"{row['samples_per_second']['min']:,.0f} - "
                    f"{row['samples_per_second']['max']:,.0f}",
                    f"{row['applied_samples_per_second']['median']:,.0f}",
                    f"{row['test_accuracy']['median']:.4f}",
                    f"{row['dropped_gradients']['median']:.0f}",
                )
                for row in backup["rows"]
            ],
        ),
    ]
    ratio, applied = backup["samples_per_second_ratio"], backup["applied_samples_per_second_ratio"]
    workers, backups = backup["workers"], backup["backups"]
    lines += [
        "",
        f"- with {backups} backup / without: samples/s **x{ratio['median']:.2f}** (per repeat "
        f"{ratio['min']:.2f} - {ratio['max']:.2f}); applied samples/s "
        f"**x{applied['median']:.2f}** ({applied['min']:.2f} - {applied['max']:.2f})",
        f"- samples/s counts each step's whole global batch; applied samples/s = samples/s x "
        f"(N-B)/N = x {workers - backups}/{workers} with backups (the dropped gradient's slice "
        "was computed but not used)",
        "",
        f"**Async straggler**: parameter server, async, {asynchronous['workers']} workers and 1 "
        f"shard, task:{asynchronous['straggler_task']} computes {factor}x as long; float32, "
        f"batch {settings['async_batch_size']}, {settings['async_steps']} steps.",
        "",
        *table(
            ("worker", "updates applied (median)", "min - max"),
            "lrr",
            [
                (
                    f"task:{rank}"
                    + (" (straggler)" if rank == asynchronous["straggler_task"] else ""),
                    f"{updates['median']:.0f}",
                    span(updates, 0),
                )
                for rank, updates in enumerate(asynchronous["updates"])
            ],
        ),
    ]
    fast_over_slow = asynchronous["fast_over_slow_updates"]
    lines += [
        "",
        f"- fast / slow worker's updates: **x{fast_over_slow['median']:.2f}** (per run "
        f"{fast_over_slow['min']:.2f} - {fast_over_slow['max']:.2f}); "
        f"{asynchronous['samples_per_second']['median']:,.0f} samples/s, test accuracy "
        f"{asynchronous['test_accuracy']['median']:.4f}, largest staleness "
        f"{asynchronous['staleness_max']}",
        f"- method: {settings['repeats']} run{'s' if settings['repeats'] != 1 else ''} of "
        "each, alternating (killed or not; with or without backups), after one untimed warm-up "
        "run; every run starts its own local cluster (Dask worker processes with one BLAS "
        "thread); samples/s = the summary's steady state; recovery figures from the run's "
        "failure and recovery events; medians and ranges over runs, ratios taken run by run",
    ]
    return "\n".join(lines)
