"""A device on a Dask worker that runs its partition of a client graph each step: a
model-parallel device, or a device of an in-graph replicated run (mirrored or central-storage
towers, ``data_parallel/in_graph.py``).

Its Send/Recv ops reach the peer devices through a per-step rendezvous over the peer transport
(keys prefixed with the step, so steps never mix); the time a Recv waits is reported as ``recv``
and the rest of the partition's run as ``compute``, so the events show how much of a
model-parallel step each device spends waiting on the others. Its ``all_reduce`` nodes meet
the other devices' through :class:`StepCollectives` (the ring, over the same transport), logged
as ``allreduce``. Placeholders say what they want by name (:func:`feed_parts`): a tower's
``tower_<i>/inputs`` gets replica i's rows of the global batch, plain ``inputs`` all of it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.data import GlobalBatchSampler, shard_rows
from workbench.events.records import Phase, PhaseEvent, StepReport
from workbench.ir import Executable, Graph
from workbench.ir.ops.communication import COLLECTIVES, RENDEZVOUS
from workbench.optim import LearningRateSchedule, make_optimizer
from workbench.parallel.collectives import allreduce
from workbench.parallel.resident_steps import ResidentProgram, keep_resident
from workbench.parallel.stop_gate import may_begin
from workbench.parallel.towers import feed_parts
from workbench.parallel.worker_spec import (
    WorkerSpec,
    training_data,
)
from workbench.runtime.peer_transport import PeerTransport
from workbench.training.graphs import DROPOUT_SEED, INPUTS, LABELS, LEARNING_RATE
from workbench.training.session import dropout_seed


@dataclass(frozen=True)
class DeviceSpec:
    worker: WorkerSpec
    partition: Graph
    stall_timeout: float
    towers: int = 1  # replicas the global batch is split over (in-graph replication)


class StepRendezvous:
    """The ``RENDEZVOUS`` object send/recv ops call: device names -> ranks, keys per step."""

    def __init__(self, transport: PeerTransport, devices: list[str], clock, state: dict) -> None:
        self.transport, self.rank_of, self.clock = (
            transport,
            {d: i for i, d in enumerate(devices)},
            clock,
        )
        self.step = 0
        self.waits: list[tuple[float, float, int]] = []
        self.sent = 0
        # A variable sent as it is read may be updated in place later in the same step,
        # before an RPC send has serialised it: such sends take a copy.
        self.resident = {id(value) for value in state.values()}

    def send(self, target: str, key: str, value) -> None:
        if id(value) in self.resident:
            value = value.copy()
        self.transport.send_async(self.rank_of[target], f"s{self.step}/{key}", value)
        self.sent += int(value.nbytes)

    def recv(self, source: str, key: str):
        start = self.clock()
        value = self.transport.recv(self.rank_of[source], f"s{self.step}/{key}")
        self.waits.append((start, self.clock(), int(value.nbytes)))
        return value


class StepCollectives:
    """The ``COLLECTIVES`` object ``all_reduce`` ops call: the ring over the peer transport,
    keys per step; each call is logged (start, end, bytes sent, bytes received)."""

    def __init__(self, transport: PeerTransport, clock) -> None:
        self.transport, self.clock = transport, clock
        self.step = 0
        self.calls: list[tuple[float, float, int, int]] = []

    def all_reduce(self, key: str, value):
        start, transport = self.clock(), self.transport
        sent, received = transport.bytes_sent, transport.bytes_received
        total = allreduce(transport, value.copy(), f"s{self.step}/{key}", "ring", inplace=True)
        traffic = (transport.bytes_sent - sent, transport.bytes_received - received)
        self.calls.append((start, self.clock(), *traffic))
        return total


class ModelParallelDevice(ResidentProgram):
    def __init__(self, spec: DeviceSpec) -> None:
        worker = self.worker = spec.worker
        config = self.config = worker.run_config
        dataset = worker.dataset()
        self.model = worker.model
        optimizer = make_optimizer(config.optimizer)
        self.sampler = GlobalBatchSampler(len(dataset.y_train), config.batch_size, config.seed)
        self.schedule = LearningRateSchedule.from_config(config, optimizer, worker.total_steps)
        self.program = Executable(spec.partition)
        self.names = tuple(
            dict.fromkeys(n.attrs["var"] for n in spec.partition.nodes if n.op == "variable")
        )
        self.towers = spec.towers
        super().__init__(worker, optimizer, self.names)
        self.needs = {name: feed_parts(name) for name in self.program.placeholders}
        if {feed for _, feed in self.needs.values()} & {INPUTS, LABELS}:
            # The training set goes to the device once; each step gathers its rows there.
            self.inputs, self.labels = training_data(dataset, self.model, config.dtype, self.arrays)
        self.dtype = np.dtype(config.dtype).type
        self.transport = PeerTransport(
            worker.run_id,
            worker.rank,
            worker.addresses,
            worker.device_names,
            spec.stall_timeout,
            self.arrays,
        )
        self.rendezvous = StepRendezvous(
            self.transport, list(worker.device_names), self.clock, self.state
        )
        self.collectives = StepCollectives(self.transport, self.clock)
        self.state[RENDEZVOUS] = self.rendezvous
        self.state[COLLECTIVES] = self.collectives

    def clock(self) -> float:
        """Seconds since the run's origin, once this device's queued kernels have run (a GPU
        launches asynchronously: a phase ends when its work does)."""
        self.arrays.synchronize()
        return time.time() - self.worker.clock_origin

    def run(self, first: int, count: int) -> StepReport:
        events: list[PhaseEvent] = []
        losses = []
        for step in range(first, first + count):
            if not may_begin(self.worker.run_id, step):
                break  # the run was stopped (docs/architecture/faults.md, "Faults and stragglers")
            self.transport.step = self.rendezvous.step = self.collectives.step = step
            self.current_step = step
            self.memory.begin(self.state)
            feeds = self._feeds(step)
            self.rendezvous.waits, self.rendezvous.sent = [], 0
            self.collectives.calls = []
            start = self.clock()
            with self.straggler.computing():
                out = self.program.run(feeds, self.state, self.xp, ledger=self.memory.ledger)
            self.transport.flush()
            self.memory.end()
            end = self.clock()
            cursor = start
            path = self.transport.paths_taken()
            waits = [(a, b, Phase.RECV, 0, n) for a, b, n in self.rendezvous.waits]
            waits += [
                (a, b, Phase.ALLREDUCE, out, into) for a, b, out, into in self.collectives.calls
            ]
            for wait_start, wait_end, phase, sent, received in sorted(waits):
                events.append(PhaseEvent(self.device, Phase.COMPUTE, step, cursor, wait_start))
                events.append(
                    PhaseEvent(self.device, phase, step, wait_start, wait_end, sent, received, path)
                )
                cursor = wait_end
            events.append(PhaseEvent(self.device, Phase.COMPUTE, step, cursor, end))
            if self.rendezvous.sent:
                events.append(
                    PhaseEvent(
                        self.device, Phase.SEND, step, end, end, self.rendezvous.sent, 0, path
                    )
                )
            loss = next((value for key, value in out.items() if key.endswith("loss")), None)
            losses.append((step, None if loss is None else float(loss)))
        scalars = self.memory.report(losses[-1][0]) if losses else []
        return {"events": events, "losses": losses, "scalars": scalars}

    def _feeds(self, step: int) -> dict[str, Any]:
        """What each placeholder wants this step (by its name, :func:`feed_parts`)."""
        feeds: dict[str, Any] = {}
        batch = None
        for name, (tower, feed) in self.needs.items():
            if feed in (INPUTS, LABELS):
                if batch is None:
                    batch = self.xp.asarray(self.sampler.batch_indices(step))
                rows = batch
                if tower is not None:  # this tower's rows of the global batch
                    rows = batch[shard_rows(self.config.batch_size, tower, self.towers)]
                feeds[name] = (self.inputs if feed == INPUTS else self.labels)[rows]
            elif feed == LEARNING_RATE:
                feeds[name] = self.arrays.scalar(self.dtype(self.schedule(step)))
            elif feed == DROPOUT_SEED:
                feeds[name] = dropout_seed(self.config.seed, step)
            else:
                raise KeyError(f"{self.device}: nothing feeds placeholder {name!r}")
        return feeds


def setup_device(spec: DeviceSpec) -> str:
    return keep_resident(spec.worker, ModelParallelDevice(spec))
