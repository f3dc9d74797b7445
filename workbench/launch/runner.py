"""Running one training job end to end: validate, load data, build, train, evaluate, save.

Every check that can fail on user input runs before training starts, and a checkpoint is only
written after training succeeded (and then atomically).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from workbench.checkpoint import check_fits_model, load_checkpoint
from workbench.config import ConfigError, RunConfig, total_steps
from workbench.dashboard import DashboardObserver
from workbench.data import Dataset, DatasetError, GlobalBatchSampler, load_dataset
from workbench.events import EventLog, summarize
from workbench.events.faults import failure_reasons
from workbench.events.memory_summary import largest_peak_line, memory_summary
from workbench.launch.machine_limits import build_checked_model, check_local_devices
from workbench.launch.tensorboard_run import LiveTensorBoard
from workbench.models import Sequential
from workbench.optim import LearningRateSchedule, init_slots, make_optimizer
from workbench.parallel.mixed_precision import precision_summary
from workbench.planner.device_costs import measured_costs
from workbench.planner.predict import PlanningError, Prediction, predict
from workbench.runtime import array_module, resolve_device_type
from workbench.runtime.cluster import local_device_type
from workbench.runtime.cluster_target import ClusterError, ClusterTarget, read_scheduler_file
from workbench.runtime.scheduler_probe import SchedulerProbeError, probe_scheduler
from workbench.strategies import STRATEGIES, StrategyDefinition, validate_config
from workbench.strategies.accumulation import accumulation_summary, describe_accumulation
from workbench.strategies.cluster_strategy import ClusterStrategy
from workbench.strategies.precision import check_precision_on_device
from workbench.strategies.recomputation import check_recompute
from workbench.training.job import Progress, TrainingJob, TrainOutcome, evaluate_on_test
from workbench.training.run_checkpoint import save_run_checkpoint

# A checkpoint continues the same run only if these match: they decide the model, the data
# order and the arithmetic.
RESUME_MUST_MATCH = ("model", "hidden", "dataset", "dtype", "optimizer", "batch_size", "seed")


@dataclass
class RunResult:
    summary: dict[str, Any]
    parameters: dict[str, np.ndarray]
    optimizer_state: dict[str, np.ndarray]
    log: EventLog
    # The planner's step for this run, from its own calibration (its timeline, device by
    # device: what workbench.notebook.step_view draws beside a measured step).
    prediction: Prediction | None = None


def stderr_progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _check_resume(config: RunConfig, saved: dict) -> None:
    for key in RESUME_MUST_MATCH:
        mine = list(config.hidden) if key == "hidden" else getattr(config, key)
        if saved.get(key) != mine:
            raise ConfigError(
                "--resume",
                f"the checkpoint was saved with --{key.replace('_', '-')} {saved.get(key)!r} but "
                f"this run uses {mine!r}; resume with the same value",
            )


def check_scheduler_reachable(target: ClusterTarget, timeout: float = 3.0) -> None:
    """Fail now, naming the flag, if no Dask scheduler answers at ``--cluster`` or at the
    address of an existing ``--scheduler-file`` (a run in the background would otherwise
    fail only later, out of sight; a file still to be written is waited for at the join)."""
    address = target.address
    if target.scheduler_file is not None:
        path = Path(target.scheduler_file).expanduser()
        if not path.exists():
            return
        try:
            address = read_scheduler_file(path)
        except ClusterError as error:
            raise ConfigError(target.flag, str(error).partition(": ")[2]) from None
    try:
        probe_scheduler(address, target.ssl_context(), timeout)
    except SchedulerProbeError as error:
        raise ConfigError(target.flag, str(error)) from None


@dataclass
class PreparedRun:
    """A run that passed every check on user input and has its data and model, but has not
    started anything (no cluster, no thread): what :func:`execute_run` trains."""

    config: RunConfig
    job: TrainingJob
    strategy: StrategyDefinition
    wall_start: float


def run_training(
    config: RunConfig,
    log: EventLog | None = None,
    progress: Progress = stderr_progress,
    job_hook=None,
    model: Sequential | None = None,
    dataset: Dataset | None = None,
) -> RunResult:
    """Train as ``config`` says and return the ``--json`` summary plus the final variables.

    ``model`` replaces the ``--model`` preset with a model built in Python (its input shape and
    classes must fit the data set); ``dataset``, the data set ``config.dataset`` names, with
    arrays given in Python (:func:`workbench.data.fit_arrays_dataset`)."""
    prepared = prepare_run(config, model, dataset)
    if job_hook is not None:  # sees the job; may hand back a variant of it to train instead
        job = job_hook(prepared.job)
        if job is not None:
            prepared = replace(prepared, job=job)
    return execute_run(prepared, log or EventLog(), progress)


def prepare_run(
    config: RunConfig, model: Sequential | None = None, dataset: Dataset | None = None
) -> PreparedRun:
    """Every check that can fail on user input, the data set and the model; raises
    :class:`ConfigError` (or a checkpoint or model error) before anything starts.
    ``dataset``: the data set ``config.dataset`` names, when it was made in Python (arrays
    given to ``fit``) rather than loaded by name."""
    wall_start = time.perf_counter()
    config = validate_config(config)
    strategy = STRATEGIES[config.strategy]
    # A run in this process uses this machine's device; a cluster run's device type is decided
    # by its workers' reports (workbench/runtime/device_probe.py), which may be elsewhere.
    in_process = not isinstance(strategy, ClusterStrategy)
    target = ClusterTarget.of(config)
    local_devices = 1 if in_process else config.devices if target.starts_its_own else 0
    if local_devices > 1:
        check_local_devices(config)
    if target.address is not None or target.scheduler_file is not None:
        check_scheduler_reachable(target)
    device_type = resolve_device_type(config.device_type) if in_process else config.device_type
    if config.precision == "mixed-bf16" and (in_process or target.starts_its_own):
        # This machine's GPUs compute the run: their CuPy says whether it has bfloat16.
        here = (
            device_type
            if in_process
            else local_device_type(device_type, local_devices, config.share_gpu)
        )
        check_precision_on_device(config, here)
    checkpoint = load_checkpoint(config.resume) if config.resume else None
    if checkpoint is not None:
        _check_resume(config, checkpoint.config)
    if dataset is not None and dataset.name != config.dataset:
        raise ConfigError(
            "dataset", f"the arrays given are {dataset.name}, but the run names {config.dataset}"
        )
    try:
        dataset = dataset or load_dataset(config.dataset, seed=config.seed)
    except DatasetError as error:
        raise ConfigError("--dataset", str(error)) from None
    if model is None:
        model = build_checked_model(config, dataset.input_shape, dataset.num_classes, local_devices)
    elif model.input_shape != tuple(dataset.input_shape) or model.output_shape != (
        dataset.num_classes,
    ):
        raise ConfigError(
            "model",
            f"the model maps {model.input_shape} to {model.output_shape}, but {dataset.name} "
            f"has inputs {tuple(dataset.input_shape)} and {dataset.num_classes} classes",
        )
    optimizer = make_optimizer(config.optimizer)
    if checkpoint is not None:  # a misfit would fail only mid-training, on a device
        parameters = model.init_parameters(config.seed, config.dtype)
        slots = init_slots(optimizer, parameters)
        specs = [{n: (a.shape, a.dtype.name) for n, a in d.items()} for d in (parameters, slots)]
        check_fits_model(config.resume, checkpoint, *specs, config.optimizer)
    try:
        sampler = GlobalBatchSampler(len(dataset.y_train), config.batch_size, config.seed)
    except DatasetError as error:
        raise ConfigError("--batch-size", str(error)) from None
    steps = total_steps(config, sampler.steps_per_epoch)
    first_step = checkpoint.step if checkpoint is not None else 0
    if first_step > steps:
        raise ConfigError("--steps", f"the checkpoint is already at step {first_step} > {steps}")
    schedule = LearningRateSchedule.from_config(config, optimizer, steps)
    strategy.check_model(config, model)
    check_recompute(config, model)

    job = TrainingJob(
        config=config,
        model=model,
        optimizer=optimizer,
        dataset=dataset,
        sampler=sampler,
        schedule=schedule,
        first_step=first_step,
        total_steps=steps,
        device_type=device_type,
        xp=array_module(device_type) if in_process else np,
        initial_parameters=checkpoint.params if checkpoint else None,
        initial_optimizer_state=checkpoint.optimizer_state if checkpoint else None,
        observers=[DashboardObserver()],  # a cluster run's events reach its dashboard pages
    )
    return PreparedRun(config, job, strategy, wall_start)


def predicted_figures(
    config: RunConfig,
    job: TrainingJob,
    outcome: TrainOutcome,
    samples_per_second: float,
    progress: Progress,
) -> tuple[dict, Prediction | None]:
    """What the planner predicted for this run's step from the run's own calibration, beside
    the step the run measured (steady state): ``predicted_step_ms``, ``measured_step_ms``;
    and the prediction. Nothing when the run has no calibration or its strategy is not
    predicted."""
    if outcome.calibration is None:
        return {}, None
    try:
        costs = measured_costs(outcome.calibration)
        prediction = predict(config, job.model, job.optimizer, costs)
    except PlanningError as error:
        progress(f"[plan] no prediction: {error}")
        return {}, None
    measured = config.batch_size / samples_per_second * 1e3 if samples_per_second else None
    progress(
        f"[plan] predicted step {prediction.step_seconds * 1e3:.2f} ms"
        + (f", measured {measured:.2f} ms" if measured else "")
    )
    return {
        "predicted_step_ms": round(prediction.step_seconds * 1e3, 4),
        "measured_step_ms": round(measured, 4) if measured else None,
        # What calibrating took this run, before its first step (0: all of it cached).
        "calibration_seconds": round(outcome.calibration_seconds, 4),
    }, prediction


def execute_run(
    prepared: PreparedRun, log: EventLog, progress: Progress, run_name: str | None = None
) -> RunResult:
    """Train a prepared run (stops early when ``prepared.job.stop`` is set), evaluate, save;
    with ``--tensorboard``, write its TensorBoard files as it goes, into a folder named
    ``run_name`` (default: its start time and strategy), closed also when the run fails."""
    board = LiveTensorBoard.attach(prepared.config, prepared.job, log, progress, run_name)
    try:
        result = _train_and_summarize(prepared, log, progress)
    except BaseException:
        board.close()
        raise
    board.close(result.summary)
    return result


def _train_and_summarize(prepared: PreparedRun, log: EventLog, progress: Progress) -> RunResult:
    """Train, evaluate, save, and summarise the run from its events."""
    config, job, strategy = prepared.config, prepared.job, prepared.strategy
    model, dataset, device_type = job.model, job.dataset, job.device_type
    steps, first_step = job.total_steps, job.first_step
    progress(
        f"[{config.strategy}] {model.name} on {dataset.name}: {steps - first_step} steps "
        f"of batch {config.batch_size}{describe_accumulation(config)}, {config.dtype}, "
        f"{device_type}"
    )
    outcome = strategy.train(config, job, log, progress)
    trained, device_type, faults = outcome.trained, outcome.device_type, outcome.faults
    test_loss, test_accuracy = outcome.test_result or evaluate_on_test(job, trained, log)
    parameters, optimizer_state = trained.parameters(), trained.optimizer_state()
    losses = log.scalars("loss")
    completed = losses[-1].step + 1 if losses else first_step
    if config.save:
        # A run stopped during a fault saves its restart point's variables, labelled so.
        saved_step = completed if trained.variables_step is None else trained.variables_step
        save_run_checkpoint(config.save, config, saved_step, parameters, optimizer_state)
    devices = strategy.device_names(config, device_type)
    figures = summarize(log, devices, config.batch_size)
    summary = {
        "strategy": config.strategy,
        "devices": len(devices),
        "device_type": device_type,
        "model": config.model,
        "dataset": dataset.name,
        "dtype": config.dtype,
        "steps": completed - first_step,
        "first_step": first_step,
        "global_batch_size": config.batch_size,
        # --accumulate: micro-steps per step, and the rows each computes on a replica.
        **accumulation_summary(config),
        "final_loss": losses[-1].value if losses else None,
        "test_loss": test_loss,
        "test_accuracy": test_accuracy,
        "samples_per_second": figures["samples_per_second"],
        "wall_seconds": time.perf_counter() - prepared.wall_start,
        "bytes_communicated": figures["bytes_communicated"],
        "per_device": figures["per_device"],
        "warmup_steps_excluded": figures["warmup_steps_excluded"],
        "saved_to": config.save,
        # Recoveries from the last checkpoint, and the completed steps they ran again.
        "restarts": faults.restarts,
        "steps_recomputed": faults.steps_recomputed,
        "recovery_seconds": [round(s, 3) for s in faults.recovery_seconds],
        # Why each failure happened, and where the run restarted from (status.json's too).
        "failure_reasons": failure_reasons(log.events),
        # What each device held at most, measured (docs/guide/command-line.md).
        "memory": memory_summary(log, devices),
    }
    if faults.devices is not None and faults.devices != len(devices):
        summary["devices_at_end"] = faults.devices  # an elastic run that lost devices
    summary.update(precision_summary(config.precision, log))
    extra = strategy.summary_fields(config, log, devices)
    for entry, more in zip(summary["per_device"], extra.pop("per_device", ())):
        entry.update(more)  # e.g. a parameter server's updates per worker
    summary.update(extra)
    predicted, prediction = predicted_figures(
        config, job, outcome, figures["samples_per_second"], progress
    )
    summary.update(predicted)

    progress(
        f"[{config.strategy}] test accuracy {test_accuracy:.4f}  test loss {test_loss:.4f}  "
        f"{figures['samples_per_second']:,.0f} samples/s"
    )
    peak_line = largest_peak_line(summary["memory"])
    if peak_line:
        progress(f"[{config.strategy}] {peak_line}")
    return RunResult(summary, parameters, optimizer_state, log, prediction)
