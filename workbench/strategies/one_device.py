"""``one-device``: the whole step on one device, the oracle every other strategy must match.

Mirrors TF's ``OneDeviceStrategy``. The step runs in this process through the reference
interpreter; variables stay resident in the session's store between steps. With
``--accumulate K`` a step is K micro-steps on consecutive slices of the batch and one update
(:mod:`workbench.training.accumulated_step`).
"""

from __future__ import annotations

from contextlib import nullcontext

from workbench.calibration.run_start import calibrate_run
from workbench.config import ConfigError, RunConfig
from workbench.data import ModelInputs
from workbench.events import EventLog, Phase
from workbench.parallel.mixed_precision import LossScaledStep
from workbench.parallel.periodic_checkpoints import PeriodicCheckpoints
from workbench.parallel.straggler import SimulatedStraggler
from workbench.runtime import device_name
from workbench.runtime.device_memory import DeviceMemory, is_counted
from workbench.runtime.gpu_metrics import this_process_gpu_metrics
from workbench.strategies.definition import StrategyDefinition
from workbench.training.accumulated_step import AccumulatedStep
from workbench.training.job import Progress, TrainingJob, TrainOutcome, epoch_progress
from workbench.training.session import TrainingSession

# Steps between NVML samples on a GPU (cluster runs sample once per dispatched task, likewise).
GPU_METRICS_EVERY = 20


class OneDevice(StrategyDefinition):
    name = "one-device"
    description = "the whole step on one device in this process: the oracle"
    options = ()
    planning = "workbench.planner.strategy_planning:ONE_DEVICE"

    def check_config(self, config: RunConfig) -> None:
        if config.devices != 1:
            raise ConfigError(
                "--devices", f"strategy one-device uses exactly 1 device, got {config.devices}"
            )
        for flag, value in (
            ("--cluster", config.cluster),
            ("--scheduler-file", config.scheduler_file),
        ):
            if value is not None:
                raise ConfigError(
                    flag, "strategy one-device runs in this process; use a distributed strategy"
                )

    def device_names(self, config: RunConfig, device_type: str) -> list[str]:
        return [device_name(device_type)]

    def train(
        self, config: RunConfig, job: TrainingJob, log: EventLog, progress: Progress
    ) -> TrainOutcome:
        xp = job.xp
        (device,) = self.device_names(config, job.device_type)
        calibrated = calibrate_run(
            job, self.device_batch_sizes(config), progress, in_process_device=device
        )
        session = TrainingSession(
            job.model,
            job.optimizer,
            job.sampler.batch_size,
            config.dtype,
            config.seed,
            xp,
            recompute=config.recompute,
        )
        if job.initial_parameters is not None:
            session.load_state(job.initial_parameters, job.initial_optimizer_state or {})
        # The training set moves to the device once, as stored; each step gathers its rows
        # and converts just those to the model's inputs.
        dataset = job.dataset
        inputs = ModelInputs(xp.asarray(dataset.x_train), dataset.input_scale, session.input_dtype)
        labels = xp.asarray(dataset.y_train)
        # One process, nothing to recover: periodic checkpoints only when asked for.
        checkpoints = PeriodicCheckpoints(job) if config.checkpoint_every else None
        straggler = SimulatedStraggler.for_device(config.to_dict(), device)
        step_of = (
            AccumulatedStep(session, config.accumulate).step
            if config.accumulate > 1
            else session.step
        )
        # --precision mixed-*: 16-bit steps with loss scaling (accumulating too, if asked).
        mixed = None
        if config.precision != "fp32":
            mixed = LossScaledStep(
                session, config.precision, config.accumulate, config.simulate_overflow
            )
            step_of = mixed.step
        # Every step runs the same program on the same shapes, so a sample of the steps is
        # counted and reported (counting costs about as much as a small model's step).
        memory = DeviceMemory(device, xp)
        for step in range(job.first_step, job.total_steps):
            if job.stop.is_set():
                progress(f"[{self.name}] stopped at step {step}")
                break
            rows = xp.asarray(job.sampler.batch_indices(step))
            batch_x, batch_y = inputs[rows], labels[rows]
            learning_rate = job.schedule(step)
            start = job.clock()
            measured = is_counted(step, job.first_step)
            session.ledger = memory.ledger if measured else None
            with straggler.computing(), memory.step(session.state) if measured else nullcontext():
                loss = float(step_of(batch_x, batch_y, learning_rate, step))  # syncs a GPU
            end = job.clock()
            if checkpoints is not None and checkpoints.due(step + 1):
                checkpoints.save(step + 1, session.parameters(), session.optimizer_state())
            log.phase(device, Phase.COMPUTE, step, start, end)
            log.scalar("loss", step, loss, end)
            log.scalar("lr", step, learning_rate, end)
            for name, value in mixed.reports() if mixed is not None else ():
                log.scalar(name, step, value, end)
            if job.device_type == "gpu" and step % GPU_METRICS_EVERY == 0:
                figures = this_process_gpu_metrics()
                if figures is not None:  # NVML's view of this GPU, as cluster runs report it
                    log.scalar("gpu_utilization", step, figures[0], end, device=device)
                    log.scalar("gpu_memory_used", step, figures[1], end, device=device)
            if measured:
                for name, at, value, on in memory.report(step):
                    log.scalar(name, at, value, end, device=on)
            line = epoch_progress(job, step, loss, self.name)
            if line:
                progress(line)
        return TrainOutcome(
            session,
            job.device_type,
            calibration=calibrated.calibration,
            calibration_seconds=calibrated.seconds,
        )
