"""What every data-parallel device does first: compute gradients on its slice of the batch.

A ``GradientWorker`` owns the model's gradient graph for the per-replica batch, the variables
(resident, updated in place) and the data it reads: its own shard of each global batch (the
between-graph way), or batches the client hands it (the in-graph way). Strategies add what
happens to the gradients next: an all-reduce, a central update, parameter-server pushes.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from workbench.config import RunConfig
from workbench.data import GlobalBatchSampler, shard_rows
from workbench.ir import Executable
from workbench.optim import LearningRateSchedule, make_optimizer
from workbench.parallel.worker_spec import (
    WorkerSpec,
    host_snapshot,
    initial_state,
    training_data,
)
from workbench.training.graphs import (
    DROPOUT_SEED,
    INPUTS,
    LABELS,
    build_training_graph,
    gradient_name,
)
from workbench.training.session import dropout_seed


class GradientWorker:
    def __init__(self, spec: WorkerSpec) -> None:
        self.spec = spec
        config = self.config = RunConfig.from_dict(spec.config)
        dataset = spec.dataset()
        self.model = spec.model
        self.optimizer = make_optimizer(config.optimizer)
        self.sampler = GlobalBatchSampler(len(dataset.y_train), config.batch_size, config.seed)
        self.schedule = LearningRateSchedule.from_config(config, self.optimizer, spec.total_steps)
        self.rows = shard_rows(config.batch_size, spec.rank, spec.replicas)
        self.names, self.gradients = self.gradient_program()
        self.device = spec.device
        self.arrays = spec.device_arrays()
        self.xp = self.arrays.xp
        self.current_step = spec.total_steps
        self.state = self.resident_state()
        self.dtype = np.dtype(config.dtype).type
        self.straggler = spec.straggler()
        if spec.reads_own_data:
            # The training set goes to the device once; each step gathers its rows there.
            self.inputs, self.labels = training_data(dataset, self.model, config.dtype, self.arrays)

    def gradient_program(self) -> tuple[tuple[str, ...], Executable]:
        """(parameter names, the program computing this replica's loss and gradients)."""
        training = build_training_graph(
            self.model, None, self.config.batch_size // self.spec.replicas, self.config.dtype
        )
        return training.parameter_names, Executable(training.graph)

    def resident_state(self) -> dict[str, Any]:
        """What stays on this device between steps: every variable and optimizer slot."""
        return initial_state(self.spec, self.optimizer, self.arrays)

    def clock(self) -> float:
        """Seconds since the run's origin at a phase boundary, once this device's queued
        kernels have run (a GPU launches asynchronously: a phase ends when its work does)."""
        self.arrays.synchronize()
        return self.elapsed()

    def elapsed(self) -> float:
        """Seconds since the run's origin as the host sees them, without waiting for the
        device (inside a phase, where a wait would stall the kernels being launched)."""
        return time.time() - self.spec.clock_origin

    def batch(self, step: int, fed: tuple | None = None) -> tuple:
        if fed is not None:  # in-graph: the client's host arrays, copied to the device
            return tuple(self.arrays.to_device(part) for part in fed)
        rows = self.xp.asarray(self.sampler.batch_indices(step)[self.rows])
        return self.inputs[rows], self.labels[rows]

    def compute(
        self, step: int, fed: tuple | None = None, on_fetch=None
    ) -> tuple[dict[str, Any], float]:
        """Gradients (by parameter name) and the loss of this device's slice of step ``step``;
        ``on_fetch(name, value)`` sees each gradient as soon as backward produces it."""
        self.current_step = step
        inputs, labels = self.batch(step, fed)
        feeds = {INPUTS: inputs, LABELS: labels}
        if self.model.uses_dropout:
            feeds[DROPOUT_SEED] = dropout_seed(self.config.seed, step)
        with self.straggler.computing():
            out = self.gradients.run(feeds, self.state, self.xp, on_fetch=on_fetch)
        return {name: out[gradient_name(name)] for name in self.names}, float(out["loss"])

    def learning_rate(self, step: int) -> Any:
        return self.arrays.scalar(self.dtype(self.schedule(step)))

    def snapshot(self) -> dict[str, dict[str, np.ndarray]]:
        return host_snapshot(self.arrays, self.state, self.names)
