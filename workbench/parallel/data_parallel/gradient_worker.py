"""What every data-parallel device does first: compute gradients on its slice of the batch.

A ``GradientWorker`` owns the model's gradient graph for the per-replica batch, the variables
(resident, updated in place) and the data it reads: its own shard of each global batch (the
between-graph way), or batches the client hands it (the in-graph way). Strategies add what
happens to the gradients next: an all-reduce, a central update, parameter-server pushes.

With ``--accumulate K`` the program is built for a micro-step's rows (the replica's share over
K) and :meth:`GradientWorker.compute` runs it K times on consecutive slices of the replica's
rows, returning the mean of their gradients (:mod:`workbench.training.gradient_accumulation`).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from workbench.config import RunConfig
from workbench.data import GlobalBatchSampler, shard_rows
from workbench.ir import Executable
from workbench.ir.memory import MemoryLedger
from workbench.optim import LearningRateSchedule, make_optimizer
from workbench.parallel.worker_spec import (
    WorkerSpec,
    host_snapshot,
    initial_state,
    training_data,
)
from workbench.runtime.device_memory import DeviceMemory
from workbench.training.gradient_accumulation import GradientSum, mean_loss, micro_slices
from workbench.training.graphs import (
    DROPOUT_SEED,
    INPUTS,
    LABELS,
    LOSS_SCALE,
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
        # --accumulate: micro-steps per step, each on rows // micro_steps of this replica's rows.
        self.micro_steps = config.accumulate
        # Where the accumulation buffers are counted (under "gradients"), when the device
        # keeps a ledger.
        self.ledger: MemoryLedger | None = None
        self.names, self.gradients = self.gradient_program()
        self.device = spec.device
        self.arrays = spec.device_arrays()
        self.xp = self.arrays.xp
        self.current_step = spec.total_steps
        self.state = self.resident_state()
        # What this device measures of its memory; its programs count in the ledger.
        self.memory = DeviceMemory(self.device, self.xp)
        self.ledger = self.memory.ledger
        self.dtype = np.dtype(config.dtype).type
        self.straggler = spec.straggler()
        if spec.reads_own_data:
            # The training set goes to the device once; each step gathers its rows there.
            self.inputs, self.labels = training_data(dataset, self.model, config.dtype, self.arrays)

    def gradient_program(self) -> tuple[tuple[str, ...], Executable]:
        """(parameter names, the program computing this replica's loss and gradients)."""
        training = build_training_graph(
            self.model,
            None,
            self.micro_batch_size(),
            self.config.dtype,
            recompute=self.config.recompute,
            precision=self.config.precision,
        )
        return training.parameter_names, Executable(training.graph)

    def micro_batch_size(self) -> int:
        """The rows one micro-step computes: the replica's share of the global batch over
        ``--accumulate`` (the whole share without accumulation)."""
        return self.config.batch_size // self.spec.replicas // self.config.accumulate

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
        ``on_fetch(name, value)`` sees each gradient as soon as backward produces it (with
        ``--accumulate``, the mean over the micro-steps, as the last one produces it)."""
        self.current_step = step
        inputs, labels = self.batch(step, fed)
        with self.straggler.computing():
            if self.micro_steps == 1:
                out = self.gradients.run(
                    self.feeds(step, inputs, labels),
                    self.state,
                    self.xp,
                    on_fetch=on_fetch,
                    ledger=self.ledger,
                )
                return {name: out[gradient_name(name)] for name in self.names}, float(out["loss"])
            return self.accumulated(step, inputs, labels, on_fetch)

    def feeds(self, step: int, inputs: Any, labels: Any) -> dict[str, Any]:
        """The gradient program's feeds for ``inputs`` and ``labels`` at step ``step``. Every
        micro-step of a step draws its dropout mask from the step's seed, as every replica
        does (the mask is the same function of the seed and the slice's shape)."""
        feeds = {INPUTS: inputs, LABELS: labels}
        if self.model.uses_dropout:
            feeds[DROPOUT_SEED] = dropout_seed(self.config.seed, step)
        if self.config.precision != "fp32":
            feeds[LOSS_SCALE] = self.arrays.scalar(self.dtype(self.loss_scale()))
        return feeds

    def loss_scale(self) -> float:
        """The loss scale S of mixed precision's backward pass (docs/guide/command-line.md,
        "Mixed precision"); strategies that skip overflowing steps hold the scaler."""
        return 1.0

    def accumulated(
        self, step: int, inputs: Any, labels: Any, on_fetch=None
    ) -> tuple[dict[str, Any], float]:
        """``--accumulate K``: the program run on K consecutive slices of ``inputs`` and
        ``labels``, the earlier micro-steps' gradients summed into buffers, the last one's
        added as backward produces them (``on_fetch`` sees the means then); returns the means
        and the loss over all the rows."""
        total = GradientSum(self.micro_steps, self.xp, self.ledger)
        slices = list(micro_slices(len(labels), self.micro_steps))
        losses = []
        for rows in slices[:-1]:
            out = self.gradients.run(
                self.feeds(step, inputs[rows], labels[rows]),
                self.state,
                self.xp,
                ledger=self.ledger,
            )
            for name in self.names:
                total.add(name, out[gradient_name(name)])
            losses.append(float(out["loss"]))
        fetched, means = total.finish_on_fetch(on_fetch, prefix=gradient_name(""))
        rows = slices[-1]
        out = self.gradients.run(
            self.feeds(step, inputs[rows], labels[rows]),
            self.state,
            self.xp,
            on_fetch=fetched,
            ledger=self.ledger,
        )
        losses.append(float(out["loss"]))
        for name in self.names:
            if name not in means:  # a gradient the program did not hand to on_fetch
                means[name] = total.finish(name, out[gradient_name(name)])
        return {name: means[name] for name in self.names}, mean_loss(losses)

    def learning_rate(self, step: int) -> Any:
        return self.arrays.scalar(self.dtype(self.schedule(step)))

    def snapshot(self) -> dict[str, dict[str, np.ndarray]]:
        return host_snapshot(self.arrays, self.state, self.names)
