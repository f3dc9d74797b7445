"""A model-parallel device on a Dask worker: runs its partition of the training graph each step.

Its Send/Recv ops reach the peer devices through a per-step rendezvous over the peer transport
(keys prefixed with the step, so steps never mix); the time a Recv waits is reported as ``recv``
and the rest of the partition's run as ``compute``, so the events show how much of a
model-parallel step each device spends waiting on the others.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.data import GlobalBatchSampler, load_dataset
from workbench.ir import Executable, Graph
from workbench.ir.ops.communication import RENDEZVOUS
from workbench.optim import LearningRateSchedule, make_optimizer
from workbench.parallel.worker_spec import WorkerSpec, host_snapshot, initial_state
from workbench.runtime.peer_transport import PeerTransport
from workbench.runtime.worker_service import device_service
from workbench.training.graphs import DROPOUT_SEED, INPUTS, LABELS, LEARNING_RATE
from workbench.training.session import dropout_seed


@dataclass(frozen=True)
class DeviceSpec:
    worker: WorkerSpec
    partition: Graph
    stall_timeout: float


class StepRendezvous:
    """The ``RENDEZVOUS`` object send/recv ops call: device names -> ranks, keys per step."""

    def __init__(self, transport: PeerTransport, devices: list[str], clock) -> None:
        self.transport, self.rank_of, self.clock = (
            transport,
            {d: i for i, d in enumerate(devices)},
            clock,
        )
        self.step = 0
        self.waits: list[tuple[float, float, int]] = []
        self.sent = 0

    def send(self, target: str, key: str, value) -> None:
        self.transport.send_async(self.rank_of[target], f"s{self.step}/{key}", value)
        self.sent += int(value.nbytes)

    def recv(self, source: str, key: str):
        start = self.clock()
        value = self.transport.recv(self.rank_of[source], f"s{self.step}/{key}")
        self.waits.append((start, self.clock(), int(value.nbytes)))
        return value


class ModelParallelDevice:
    def __init__(self, spec: DeviceSpec) -> None:
        worker = self.worker = spec.worker
        config = self.config = worker.run_config
        dataset = load_dataset(config.dataset, seed=config.seed)
        model = self.model = worker.model
        optimizer = make_optimizer(config.optimizer)
        self.sampler = GlobalBatchSampler(len(dataset.y_train), config.batch_size, config.seed)
        self.schedule = LearningRateSchedule.from_config(config, optimizer, worker.total_steps)
        self.program = Executable(spec.partition)
        self.names = tuple(n.attrs["var"] for n in spec.partition.nodes if n.op == "variable")
        self.device = worker.device
        self.straggler = worker.straggler()
        self.arrays = worker.device_arrays()
        self.xp = self.arrays.xp
        self.current_step = worker.total_steps
        self.state = initial_state(worker, optimizer, self.arrays, self.names)
        self.needs = set(self.program.placeholders)
        if self.needs & {INPUTS, LABELS}:
            # The training set goes to the device once; each step gathers its rows there.
            input_dtype = "int64" if model.takes_integer_input else config.dtype
            self.inputs = self.arrays.to_device(dataset.x_train.astype(input_dtype))
            self.labels = self.arrays.to_device(dataset.y_train)
        self.dtype = np.dtype(config.dtype).type
        self.transport = PeerTransport(
            worker.run_id,
            worker.rank,
            worker.addresses,
            worker.device_names,
            spec.stall_timeout,
            self.arrays,
        )
        self.rendezvous = StepRendezvous(self.transport, list(worker.device_names), self.clock)
        self.state[RENDEZVOUS] = self.rendezvous

    def clock(self) -> float:
        return time.time() - self.worker.clock_origin

    def run(self, first: int, count: int) -> dict[str, Any]:
        events, losses = [], []
        for step in range(first, first + count):
            self.transport.step = self.rendezvous.step = self.current_step = step
            rows = self.xp.asarray(self.sampler.batch_indices(step))
            feeds: dict[str, Any] = {}
            if INPUTS in self.needs:
                feeds[INPUTS] = self.inputs[rows]
            if LABELS in self.needs:
                feeds[LABELS] = self.labels[rows]
            if LEARNING_RATE in self.needs:
                feeds[LEARNING_RATE] = self.arrays.scalar(self.dtype(self.schedule(step)))
            if DROPOUT_SEED in self.needs:
                feeds[DROPOUT_SEED] = dropout_seed(self.config.seed, step)
            self.rendezvous.waits, self.rendezvous.sent = [], 0
            start = self.clock()
            with self.straggler.computing():
                out = self.program.run(feeds, self.state, self.xp)
            self.transport.flush()
            end = self.clock()
            cursor = start
            path = self.transport.paths_taken()
            for wait_start, wait_end, nbytes in self.rendezvous.waits:
                events.append((self.device, "compute", step, cursor, wait_start, 0, 0))
                events.append((self.device, "recv", step, wait_start, wait_end, 0, nbytes, path))
                cursor = wait_end
            events.append((self.device, "compute", step, cursor, end, 0, 0))
            if self.rendezvous.sent:
                events.append((self.device, "send", step, end, end, self.rendezvous.sent, 0, path))
            losses.append((step, float(out["loss"]) if "loss" in out else None))
        return {"events": events, "losses": losses}

    def snapshot(self) -> dict[str, dict[str, np.ndarray]]:
        return host_snapshot(self.arrays, self.state, self.names)


def setup_device(spec: DeviceSpec) -> str:
    device_service().runs[spec.worker.run_id] = ModelParallelDevice(spec)
    return spec.worker.device_names[spec.worker.rank]
