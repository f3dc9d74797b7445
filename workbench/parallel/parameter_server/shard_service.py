"""A parameter-server shard running on a Dask worker (TF's ``/job:ps/task:k``).

Holds its share of the variables (or parts of them) and their optimizer slots, answers the
workers' pulls and pushes (messages through the Send/Recv transport, ``envelopes.py``) and
feeds them to the sans-IO :class:`ShardProtocol`. What it runs is its partition of the client
graph, cut in two (``ParameterServerGraph.serve_program`` and ``apply_program``): a granted
pull runs the partition's sends, a due update feeds the pushed gradients to its recvs and
runs its updates. Every message, and every call of the client's (stop, forget, drain,
snapshot), is handled on one dedicated thread in the order it arrived, so a pull granted
after update v is always answered with update v applied, and the protocol needs no lock. A
push is acknowledged before its update runs, so its worker goes on to wait for the next read.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from workbench.config import RunConfig
from workbench.events.records import Phase, PhaseEvent, ScalarEvent, StepReport
from workbench.ir import Executable
from workbench.ir.ops.communication import RENDEZVOUS
from workbench.optim import LearningRateSchedule, make_optimizer
from workbench.parallel.parameter_server.client_graph import (
    ParameterServerGraph,
    applies_plain_sgd,
    learning_rate_feed,
)
from workbench.parallel.parameter_server.envelopes import (
    PICKLED,
    PULL,
    PUSH,
    Envelope,
    ack_header,
    ack_key,
    grant_header,
    grant_key,
    open_envelope,
    unpickled,
    values_key,
)
from workbench.parallel.parameter_server.message_loop import MessageLoop
from workbench.parallel.parameter_server.messages import (
    PushMessage,
    average_pushes,
    decode_push,
)
from workbench.parallel.parameter_server.protocol import (
    ApplyUpdate,
    DropPush,
    Forget,
    IgnoreDuplicate,
    Instruction,
    Pull,
    Push,
    SendParameters,
    ShardProtocol,
    Stop,
    unhandled,
)
from workbench.parallel.parameter_server.table_rendezvous import TableRendezvous
from workbench.runtime.device_arrays import DeviceArrays
from workbench.runtime.device_memory import DeviceMemory, is_counted
from workbench.runtime.peer_transport import PeerTransport, route, wire_of
from workbench.runtime.worker_service import (
    SERVICE_NAME,
    RpcHandler,
    device_service,
    dispatch_call,
)


@dataclass(frozen=True)
class ShardSpec:
    run_id: str
    config: dict
    shard: int
    workers: int
    total_steps: int
    stall_timeout: float
    store: dict  # this shard's variables (or parts) and their optimizer slots, to start from
    # The client graph this shard's programs come from: the run's one graph (in-graph), or
    # the graph of worker 0 (between-graph: every worker's has the same shape).
    client_graph: ParameterServerGraph
    model: Any
    device: str
    clock_origin: float
    device_type: str = "cpu"
    first_step: int = 0  # the step the run (or its restore) starts from
    total_updates: int | None = None  # free-running workers: the run's budget of updates
    backups: int = 0  # sync: pushes per step not waited for (--backup-workers)
    in_graph: bool = False
    mode: str = "sync"  # --mode: sync or async
    staleness: int | None = None  # --staleness: the async updates' bound (None: unbounded)
    # Where the shard and its workers are: the session's ranks, addresses and device names.
    rank: int = 0
    addresses: tuple[str, ...] = ()
    device_names: tuple[str, ...] = ()
    worker_ranks: tuple[int, ...] = ()


Result = TypeVar("Result")
log = logging.getLogger(__name__)


class ParameterShard:
    def __init__(self, spec: ShardSpec) -> None:
        self.spec = spec
        config = RunConfig.from_dict(spec.config)
        optimizer = make_optimizer(config.optimizer)
        graph = spec.client_graph
        self.names = tuple(p.name for p in graph.pieces if p.shard == spec.shard)
        self.rendezvous = TableRendezvous()
        self.serve = Executable(graph.serve_program(spec.shard))
        apply_program = graph.apply_program(spec.shard)
        self.update = Executable(apply_program)
        self.learning_rate_feed = learning_rate_feed(spec.shard)
        towers = spec.workers if spec.in_graph else 1
        self.pulls = [graph.pulls(spec.shard, w) for w in range(towers)]
        self.pushes = [graph.pushes(spec.shard, w) for w in range(towers)]
        self.schedule = LearningRateSchedule.from_config(config, optimizer, spec.total_steps)
        self.dtype = np.dtype(config.dtype).type
        self.device = spec.device
        self.arrays = DeviceArrays.for_kind(spec.device_type, spec.device)
        self.xp = self.arrays.xp
        self.wire = wire_of(device_service().worker.address)
        self.route = route(self.arrays.on_gpu, self.wire)  # until a worker's message says
        self.state = {n: self.arrays.to_device(v) for n, v in spec.store.items()}
        self.state[RENDEZVOUS] = self.rendezvous
        # What the shard measures of its memory: a pull served and an update applied are
        # windows (on the shard's one thread, see _run); the snapshots carry the reports.
        self.memory = DeviceMemory(self.device, self.xp)
        self.runs: dict[Executable, int] = {}  # each program's runs so far
        bound = spec.staleness if spec.mode == "async" else None
        # Versions count updates from the run's start: a step in sync mode, a push in async.
        first_version = spec.first_step * (spec.workers if spec.mode == "async" else 1)
        self.protocol = ShardProtocol(
            spec.workers,
            spec.mode,
            bound,
            version=first_version,
            total_updates=spec.total_updates,
            backups=spec.backups,
        )
        self.async_mode = spec.mode == "async"
        # Sync: the mean of the gradients applied (N, or N - B with backups). Async: each
        # worker's gradient counts 1/N, so a pass over the data moves the variables as far as
        # a synchronous pass would.
        self.scale = self.dtype(1.0 / spec.workers)
        # Async plain SGD: the 1/N rides on the learning rate, and the update reads the push
        # where it arrived, sparing the shard a pass over every pushed byte on each worker's
        # critical path (docs/guide/distributed-training.md, on parameter servers' staleness).
        self.rate_carries_scale = (
            self.async_mode and not spec.in_graph and applies_plain_sgd(apply_program)
        )
        # A granted read is answered under the asking worker's step and token.
        self.askers: dict[tuple[int, int], tuple[int, str]] = {}
        # Pushes read in place, until applied: (worker, step) -> the call handing them back.
        self.lent: dict[tuple[int, int], Callable[[], None]] = {}
        self.served: tuple[int, int, list] | None = None  # (version, tower, values) last read
        self.failure: Exception | None = None  # a message the shard could not handle
        self.events: list[PhaseEvent] = []  # this shard's phases, handed over with snapshots
        self.reports: list[
            StepReport
        ] = []  # free-running workers' reports, until the client drains
        self.transport = PeerTransport(
            spec.run_id,
            spec.rank,
            spec.addresses,
            spec.device_names,
            spec.stall_timeout,
            self.arrays,
            reads_own_channels=True,
        )
        # Every message and call is handled on this loop's one thread (message_loop.py).
        self.loop = MessageLoop(self.transport, f"ps-shard-{spec.shard}")
        for worker in spec.worker_ranks:
            self.loop.deliver_from(worker, self._handle_safely)

    def clock(self) -> float:
        return time.time() - self.spec.clock_origin

    def stop_serving(self) -> None:
        """The run is over on this worker: end the shard's thread."""
        self.loop.stop()

    # --- the workers' messages (the shard's thread) ------------------------------------------

    def _handle_safely(self, worker: int, key: str, message: Any) -> None:
        try:
            self._handle(worker, open_envelope(key), message)
        except Exception as error:  # kept for the client's next call: nothing waits here
            log.exception(
                "ps shard %s could not handle %r from worker %s", self.spec.shard, key, worker
            )
            self.failure = self.failure or error

    def _handle(self, worker: int, envelope: Envelope, message: Any) -> None:
        transport = self.transport
        if envelope.kind == PULL:
            transport.accept(worker, message, on_host=True)  # hands the segment back
            self._pull(worker, envelope.step, envelope.version, envelope.token)
        elif envelope.kind == PUSH:
            self._push(worker, envelope, message)
            if envelope.then is not None:  # the next read, asked with the push
                self._pull(worker, envelope.then, envelope.then, envelope.token)
        else:  # a free-running worker's events and losses, for the client
            self.reports.append(unpickled(transport.accept(worker, message, on_host=True)))

    def _pull(self, worker: int, step: int, wanted: int, token: str) -> None:
        """``worker`` asks for a read of version ``wanted`` or newer, answered under
        ``step``: at once, or when the protocol grants it."""
        self.askers[(worker, wanted)] = (step, token)
        self._carry_out(self.protocol.handle(Pull(worker, wanted)))

    def _push(self, worker: int, envelope: Envelope, message: Any) -> None:
        arrived = self.clock()
        if envelope.form == PICKLED:
            wired = unpickled(self.transport.accept(worker, message, on_host=True))
            gradients = wired.adopted(self.arrays)
            settle = _nothing
        else:  # read where it arrived until it is applied (or dropped): no copy
            dense, settle = self.transport.lend(worker, message)
            gradients = PushMessage(dense, {})
        step = envelope.step
        instructions = self.protocol.handle(Push(worker, step, envelope.version, gradients))
        # A repeated push (the protocol ignores it) is handed back at once, the first kept.
        repeated = (worker, step) in self.lent
        if not repeated:
            self.lent[(worker, step)] = settle
        self.events.append(
            PhaseEvent(
                self.spec.device,
                Phase.PS_PUSH,
                step,
                arrived,
                arrived,
                0,
                gradients.nbytes,
                self._route_of(worker),
            )
        )
        staleness = next(
            (
                update.staleness[update.workers.index(worker)]
                for update in instructions
                if isinstance(update, ApplyUpdate) and worker in update.workers
            ),
            None,  # sync: applied later, with staleness 0, when the last worker pushes
        )
        dropped = any(isinstance(i, DropPush) and i.worker == worker for i in instructions)
        # Acknowledged first: the worker goes on to wait for its next read meanwhile.
        ack = ack_header(staleness, dropped, self.protocol.version)
        self.transport.send(worker, ack_key(step, envelope.token), ack)
        self._carry_out(instructions, pushed_at=step)
        if repeated:
            settle()
        elif any(isinstance(i, DropPush) and i.worker == worker for i in instructions):
            self.lent.pop((worker, step), _nothing)()  # too late: never applied

    # --- the client's calls (event loop, then the shard's thread) ------------------------------

    def rpc_handlers(self) -> dict[str, RpcHandler]:
        """What the client may call (``dispatch_call``), and nothing else."""
        return {
            "forget": self.handle_forget,
            "rejoin": self.handle_rejoin,
            "stop": self.handle_stop,
            "drain": self.handle_drain,
        }

    async def _on_thread(self, work: Callable[[], Result]) -> Result:
        return await asyncio.wrap_future(self.loop.submit(work))

    async def handle_forget(self, worker: int) -> None:
        await self._on_thread(lambda: self._carry_out(self.protocol.handle(Forget(worker))))

    async def handle_rejoin(self, worker: int, address: str) -> None:
        """``worker`` is now the one at ``address`` (set up in place of a lost one)."""
        await self._on_thread(lambda: self.transport.readdress(worker, address))

    async def handle_stop(self) -> None:
        await self._on_thread(lambda: self._carry_out(self.protocol.handle(Stop())))

    async def handle_drain(self) -> dict[str, Any]:
        """The workers' reports since the last drain, and where the shard is."""
        return await self._on_thread(self._drain)

    def _drain(self) -> dict[str, Any]:
        self._raise_failure()
        reports, self.reports = self.reports, []
        protocol = self.protocol
        return {
            "reports": reports,
            "version": protocol.version,
            "done": protocol.done,
            "dropped": protocol.dropped,
            "updates": dict(protocol.updates_by_worker),
        }

    def _raise_failure(self) -> None:
        if self.failure is not None:
            raise RuntimeError(
                f"ps shard {self.spec.shard} could not handle a worker's message: {self.failure!r}"
            ) from self.failure

    def snapshot(self) -> dict[str, Any]:
        """Variables, slots, staleness log and the events since the last snapshot (taken on
        the shard's thread)."""
        return self.loop.submit(self._snapshot).result()

    def _snapshot(self) -> dict[str, Any]:
        self._raise_failure()
        state = {n: self.arrays.to_host(v) for n, v in self.state.items() if n != RENDEZVOUS}
        names = set(self.names)
        events, self.events = self.events, []  # each event is handed over once
        step = max(self.protocol.version - 1, 0)
        if self.async_mode:
            step //= self.spec.workers
        now = self.clock()
        memory = self.memory.report(step)
        reports = [ScalarEvent(name, at, value, now, on) for name, at, value, on in memory]
        return {
            "parameters": {n: v for n, v in state.items() if n in names},
            "optimizer_state": {n: v for n, v in state.items() if n not in names},
            "staleness": list(self.protocol.staleness_log),
            "events": [*events, *reports],
        }

    # --- instructions (the shard's thread) -------------------------------------------------

    def _carry_out(self, instructions: list[Instruction], pushed_at: int | None = None) -> None:
        """Carry out the protocol's ``instructions`` (``pushed_at``: the step of the push that
        caused them, which an async update applies)."""
        device = self.spec.device
        for instruction in instructions:
            match instruction:
                case ApplyUpdate(version=version, workers=workers):
                    start = self.clock()
                    self._apply(instruction)
                    # Sync: the update of step ``version``; async: the one push just made.
                    applied = pushed_at if self.async_mode and pushed_at is not None else version
                    for worker in workers:  # the pushes were read where they arrived
                        self.lent.pop((worker, applied), _nothing)()
                    step = version // self.spec.workers if self.async_mode else version
                    self.events.append(PhaseEvent(device, Phase.UPDATE, step, start, self.clock()))
                case SendParameters(worker=worker, step=step, version=version):
                    asker = self.askers.pop((worker, step), None)
                    if asker is None:
                        continue  # asked by a worker that was forgotten since
                    values = self._serve(worker, version)
                    nbytes = sum(int(part.nbytes) for part in values)
                    now = self.clock()
                    at_step, token = asker
                    grant = grant_header(version, self.protocol.done)
                    self.transport.send(worker, grant_key(at_step, token), grant)
                    # A shard that holds nothing this worker reads still answers.
                    parts = values or [self.xp.zeros(0, self.dtype)]
                    self.transport.send_packed(worker, values_key(at_step, token), parts)
                    # The route the values just took (not the small headers' before them).
                    route = self._route_of(worker)
                    self.events.append(
                        PhaseEvent(device, Phase.PS_PULL, step, now, now, nbytes, 0, route)
                    )
                case DropPush() | IgnoreDuplicate():
                    pass  # the push's answer says whether it was dropped; a duplicate needs none
                case _:
                    unhandled(instruction)

    def _route_of(self, worker: int) -> str:
        """How ``worker``'s messages travel (as its last one did)."""
        return self.transport.routes.get(worker, self.route)

    def _serve(self, worker: int, version: int) -> Any:
        """Run the partition's sends; the pull's answer is what they sent ``worker``, in
        transfer order, for the transport to pack where it sends them. Every worker that
        reads a version between-graph gets the same values: its sends run once."""
        tower = worker if self.spec.in_graph else 0
        if self.served is not None and self.served[:2] == (version, tower):
            return self.served[2]
        self.rendezvous.sent = {}
        self._run(self.serve, {})
        parts = [self.rendezvous.sent[t.key] for t in self.pulls[tower]]
        self.served = (version, tower, parts)
        return parts

    def _apply(self, update: ApplyUpdate) -> None:
        """Feed the pushed gradients to the partition's recvs and run its updates. In-graph,
        each tower's recv gets its worker's gradient and the graph's add-n sums them; a
        between-graph shard has one recv per gradient and feeds it the mean here, or, for an
        async push to plain SGD, the push as it arrived with 1/N in the learning rate."""
        step = update.version // self.spec.workers if self.async_mode else update.version
        received = {}
        rate = self.dtype(self.schedule(step))
        if self.spec.in_graph:
            for worker, message in zip(update.workers, update.gradients):
                transfers = self.pushes[worker]
                decoded = decode_push(message, transfers, self.xp)
                received.update({t.key: value for t, value in zip(transfers, decoded)})
        elif self.rate_carries_scale and len(update.gradients) == 1:
            transfers = self.pushes[0]
            decoded = decode_push(update.gradients[0], transfers, self.xp)
            received = {t.key: value for t, value in zip(transfers, decoded)}
            rate = self.dtype(rate * self.scale)
        else:
            scale = self.scale if self.async_mode else self.dtype(1.0 / len(update.gradients))
            transfers = self.pushes[0]
            averaged = average_pushes(update.gradients, transfers, scale, self.xp)
            received = {t.key: value for t, value in zip(transfers, averaged)}
        self.rendezvous.received = received
        feeds = {self.learning_rate_feed: self.arrays.scalar(rate)}
        self._run(self.update, feeds, held=received.values())  # the pushed gradients, decoded

    def _run(self, program: Executable, feeds: dict[str, Any], held: Iterable[Any] = ()) -> None:
        """Run ``program`` (the serve or the update program) on the shard's variables. Every
        run of a program has the same shapes, so a sample of the runs (:func:`is_counted`)
        is a window of the shard's memory, holding ``held`` beside what the program computes:
        counting costs about as much as the update's arithmetic, and both are on every
        worker's way to its next read."""
        runs = self.runs.get(program, 0)
        self.runs[program] = runs + 1
        if not is_counted(runs):
            program.run(feeds, self.state, self.xp)
            return
        with self.memory.step(self.state) as ledger:
            for value in held:
                self.memory.hold("communication", value)
            program.run(feeds, self.state, self.xp, ledger=ledger)


def setup_shard(spec: ShardSpec) -> str:
    device_service().runs[spec.run_id] = ParameterShard(spec)
    return f"shard {spec.shard}"


async def call_shard(run_id: str, method: str, dask_worker=None, **arguments: Any) -> Any:
    """``Client.run`` entry point: ``method`` of the run's shard on this worker (one of its
    ``rpc_handlers``), on its event loop (the client reaches a shard while workers' long tasks
    run)."""
    shard = dask_worker.plugins[SERVICE_NAME].runs.get(run_id)
    if shard is None:
        raise RuntimeError(f"run {run_id} has no shard on {dask_worker.address}")
    return await dispatch_call(shard, method, arguments)


def _nothing() -> None:
    """Handing back a push that was copied: nothing to do."""
