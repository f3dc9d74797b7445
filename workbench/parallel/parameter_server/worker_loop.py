"""A parameter-server worker (TF's ``/job:worker/task:n``): pull, compute, push, every step.

What it computes is its partition of the parameter-server client graph
(``client_graph.py``): the partition's recvs are fed by the pulls, its sends are what the
pushes carry. Pulls go to the shards in shard order (a fixed order, like lock ordering, so
bounded-staleness waits can never form a cycle); each pull is answered with the shard's
variables and the version they are at; the gradient for each shard is pushed with the version
it was computed from, which is how the shard measures staleness.

Pulls and pushes are messages (``envelopes.py``) through the Send/Recv transport: on one host
a shared-memory channel, no RPC. A worker asks for the next step's variables as soon as it
has pushed, before it waits for the push to be acknowledged, so the shard answers the moment
the update is applied (the protocol already queues a pull that is early).

With ``--accumulate K`` a worker runs its partition K times between a pull and a push, on
consecutive slices of its rows, and pushes the mean of the K gradients: one pull and one push
per step (or, async, per push), sync and async alike.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from distributed.utils import sync

from workbench.events.records import Phase, PhaseEvent, StepReport
from workbench.ir import Executable
from workbench.ir.ops.communication import RENDEZVOUS
from workbench.parallel.collectives import StallError
from workbench.parallel.collectives.compression import PushEncoder
from workbench.parallel.data_parallel.gradient_worker import GradientWorker
from workbench.parallel.parameter_server.client_graph import (
    ParameterServerGraph,
    build_parameter_server_graph,
)
from workbench.parallel.parameter_server.envelopes import (
    DENSE,
    NO_PAYLOAD,
    PICKLED,
    ack_key,
    grant_key,
    pickled,
    pull_key,
    push_key,
    read_ack,
    read_grant,
    report_key,
    values_key,
)
from workbench.parallel.parameter_server.messages import (
    dense_bytes,
    dense_parts,
    encode_push,
    unpack_pull,
)
from workbench.parallel.parameter_server.partitioner import VariablePiece
from workbench.parallel.parameter_server.table_rendezvous import TableRendezvous
from workbench.parallel.resident_steps import keep_resident
from workbench.parallel.stop_gate import may_begin
from workbench.parallel.towers import feed_parts
from workbench.parallel.worker_spec import WorkerSpec
from workbench.passes import Transfer
from workbench.runtime.compute_priority import below_services
from workbench.runtime.device_memory import REPORT_EVERY
from workbench.runtime.peer_transport import SPIN_BEFORE_SLEEP_S, PeerTransport
from workbench.runtime.worker_service import CALL_HANDLER, device_service
from workbench.training.gradient_accumulation import GradientSum, mean_loss, micro_slices
from workbench.training.graphs import DROPOUT_SEED, INPUTS, LABELS
from workbench.training.session import dropout_seed

# How often a free-running worker's events and losses go to shard 0: half the interval at
# which the client drains them (free_running.POLL_S), the most the live charts lag for it.
REPORT_SECONDS = 0.1


@dataclass(frozen=True)
class ParameterServerWorkerSpec:
    worker: WorkerSpec
    shard_addresses: tuple[str, ...]
    shard_devices: tuple[str, ...]
    shard_ranks: tuple[int, ...]  # the shards' ranks in ``worker.addresses``
    pieces: tuple[VariablePiece, ...]  # the variables (or parts) and their shards
    # In-graph replication: the client's one graph, this worker running tower ``worker.rank``.
    # Between-graph (None): the worker builds its own graph, one tower.
    client_graph: ParameterServerGraph | None = None
    mode: str = "sync"  # --mode: sync or async
    compression: str = "none"  # --compression of the pushes (canonical)
    # False for a worker set up in place of a lost one: the channels between its rank and the
    # shards were the lost process's (``PeerTransport.readdress``), so it uses Dask's comms.
    shared_memory: bool = True


class ParameterServerWorker(GradientWorker):
    def __init__(self, spec: ParameterServerWorkerSpec) -> None:
        self.ps = spec
        super().__init__(spec.worker)
        # What each placeholder of the partition wants (tower_0/inputs -> inputs).
        self.feed_of = {name: feed_parts(name)[1] for name in self.gradients.placeholders}
        self.pulls = [self.graph.pulls(k, self.tower) for k in range(len(spec.shard_devices))]
        self.pushes = [self.graph.pushes(k, self.tower) for k in range(len(spec.shard_devices))]
        self.loss_key = next(key for key in self.gradients.fetches if key.endswith("loss"))
        compression = spec.compression
        self.encoder = (
            None
            if compression == "none"
            else PushEncoder(compression, seed=self.config.seed + spec.worker.rank)
        )
        self._worker = device_service().worker
        worker = spec.worker
        self.transport = PeerTransport(
            worker.run_id,
            worker.rank,
            worker.addresses,
            worker.device_names,
            self.config.stall_timeout,
            self.arrays,
            shared_memory=None if spec.shared_memory else False,
            reads_own_channels=True,  # the worker's one thread receives everything
            spin_seconds=SPIN_BEFORE_SLEEP_S,
        )
        self.token = uuid.uuid4().hex[:8]  # this worker object's: see envelopes.py
        self.asked: int | None = None  # the step whose pulls went out with the last push
        self.settles: list = []  # hand back the variables pulled, once the push is sent

    @property
    def route(self) -> str:
        """How the pulls and pushes travel (``shared-memory``, ``tcp``, ...)."""
        return self.transport.paths_taken() or "none"

    def gradient_program(self) -> tuple[tuple[str, ...], Executable]:
        """This worker's partition of the parameter-server client graph: recv the variables,
        forward, backward, send each gradient to its shard."""
        spec, config = self.ps, self.config
        self.graph = spec.client_graph or build_parameter_server_graph(
            self.model,
            self.optimizer,
            self.micro_batch_size(),
            config.dtype,
            [spec.worker.device],
            list(spec.shard_devices),
            spec.pieces,
        )
        # Between-graph the graph has one tower, this worker's; in-graph, tower i is worker i.
        self.tower = 0 if spec.client_graph is None else spec.worker.rank
        program = self.graph.worker_program(self.tower)
        return tuple(self.model.parameter_shapes()), Executable(program)

    def resident_state(self) -> dict[str, Any]:
        """The variables live on the shards: this device keeps only what crosses the wire."""
        self.rendezvous = TableRendezvous()
        return {RENDEZVOUS: self.rendezvous}

    def _call(self, shard: int, at_step: int, method: str, **arguments: Any) -> Any:
        rpc = self._worker.rpc(self.ps.shard_addresses[shard])
        try:
            return sync(
                self._worker.loop,
                getattr(rpc, CALL_HANDLER),
                run_id=self.spec.run_id,
                method=method,
                arguments=arguments,
            )
        except Exception as error:
            raise StallError(
                f"step {at_step}: {self.device} could not {method} "
                f"{self.ps.shard_devices[shard]}: {error}"
            ) from error

    def _ask(self, shard: int, step: int, wanted: int) -> None:
        """Ask ``shard`` for a read of version ``wanted`` or newer, answered under ``step``."""
        self.transport.send(
            self.ps.shard_ranks[shard], pull_key(step, wanted, self.token), NO_PAYLOAD
        )

    def _hand_back_pulled(self) -> None:
        settles, self.settles = self.settles, []
        for settle in settles:
            settle()

    def _pull(self, step: int, newest_first: bool = False) -> tuple[list[int], int, bool]:
        """Every shard's sends to this worker, ready for the partition's recvs: (versions,
        bytes received, whether the run's updates are spent). ``newest_first`` (sync,
        free-running): ask each shard for no older a step than the shards before it granted,
        else the push to it would be ahead of it."""
        transport, token = self.transport, self.token
        transport.step = step
        self._hand_back_pulled()
        if self.asked != step and not newest_first:
            for shard in range(len(self.pulls)):
                self._ask(shard, step, step)
        self.asked = None
        versions: list[int] = []
        received, done = 0, False
        self.rendezvous.received = {}
        for shard, transfers in enumerate(self.pulls):
            peer = self.ps.shard_ranks[shard]
            if newest_first:
                self._ask(shard, step, max([step, *versions]))
            version, spent = read_grant(transport.recv(peer, grant_key(step, token), on_host=True))
            done = done or spent
            versions.append(version)
            # Read where they arrived, until this step's push (no copy on a CPU).
            values, settle = transport.recv_lent(peer, values_key(step, token))
            self.settles.append(settle)
            self.memory.hold("communication", values)  # the partition's recvs view it
            received += values.nbytes
            keys = [t.key for t in transfers]
            self.rendezvous.received.update(unpack_pull(values, transfers, keys))
        return versions, received, done

    def compute(
        self, step: int, fed: tuple | None = None, on_fetch=None
    ) -> tuple[dict[str, Any], float]:
        """Run this worker's partition on its slice of step ``step`` (after a pull): the
        gradients its sends produced, by transfer key, and the loss. With ``--accumulate K``,
        K runs on consecutive slices of the rows, and the mean of their gradients."""
        self.current_step = step
        inputs, labels = self.batch(step, fed)
        total = GradientSum(self.micro_steps, self.xp, self.ledger)
        slices = list(micro_slices(len(labels), self.micro_steps))
        losses = []
        with self.straggler.computing():
            for micro_step, rows in enumerate(slices):
                sent, loss = self._run_partition(step, inputs[rows], labels[rows])
                losses.append(loss)
                if self.micro_steps == 1:
                    return sent, loss
                last = micro_step == len(slices) - 1
                for key, gradient in sent.items():
                    if last:
                        sent[key] = total.finish(key, gradient)
                    else:
                        total.add(key, gradient)
        return sent, mean_loss(losses)

    def _run_partition(self, step: int, inputs: Any, labels: Any) -> tuple[dict, float]:
        """One run of this worker's partition on ``inputs`` and ``labels``: what its sends
        produced, by transfer key, and the loss."""
        by_feed = {INPUTS: inputs, LABELS: labels}
        if self.model.uses_dropout:
            by_feed[DROPOUT_SEED] = dropout_seed(self.config.seed, step)
        feeds = {name: by_feed[feed] for name, feed in self.feed_of.items()}
        self.rendezvous.sent = {}
        out = self.gradients.run(feeds, self.state, self.xp, ledger=self.ledger)
        return self.rendezvous.sent, float(out[self.loss_key])

    def _push(
        self,
        step: int,
        gradients: dict,
        versions: list[int],
        report: StepReport | None = None,
        then_pull: int | None = None,
    ) -> dict:
        """The gradients for each shard: bytes sent, staleness per shard, whether shard 0
        dropped it, and shard 0's version after it (``report`` goes to shard 0 first).
        ``then_pull``: ask every shard for that step's variables before waiting for the
        acknowledgements."""
        transport, token = self.transport, self.token
        pushed: dict[str, Any] = {"sent": 0, "dense": 0, "staleness": [], "dropped": False}
        pushed["version"] = versions[0]
        for shard, transfers in enumerate(self.pushes):
            peer = self.ps.shard_ranks[shard]
            if shard == 0 and report is not None:
                transport.send(peer, report_key(token), pickled(report))
            pushed["sent"] += self._send_push(
                peer, step, versions[shard], gradients, transfers, then_pull
            )
            pushed["dense"] += dense_bytes(transfers)
        self._hand_back_pulled()  # what was computed on them has been copied out
        if then_pull is not None:  # asked with each push
            self.asked = then_pull
        for shard, peer in enumerate(self.ps.shard_ranks):
            reply = read_ack(transport.recv(peer, ack_key(step, token), on_host=True))
            if shard == 0:
                # Shard 0 keeps the run's count: near the end of the budget another shard may
                # take a push shard 0 dropped (or the other way round), as async updates do.
                pushed["dropped"] = reply["dropped"]
                pushed["version"] = reply["version"]
            if reply["staleness"] is not None:
                pushed["staleness"].append(reply["staleness"])
        return pushed

    def _send_push(
        self,
        peer: int,
        step: int,
        read_version: int,
        gradients: dict,
        transfers: Sequence[Transfer],
        then_pull: int | None = None,
    ) -> int:
        """Send ``peer`` its gradients: packed straight into the channel when they are all
        dense, else as a pickled :class:`PushMessage` (row-sparse or compressed entries);
        the bytes sent. ``then_pull``: the push asks for that step's read too."""
        transport, token = self.transport, self.token
        row_sparse = self.graph.row_sparse
        parts = dense_parts(gradients, transfers, row_sparse, self.encoder)
        if parts is not None:
            transport.send_packed(
                peer, push_key(step, read_version, token, DENSE, then_pull), parts
            )
            return sum(int(part.nbytes) for part in parts)
        message = encode_push(gradients, transfers, row_sparse, self.xp, self.encoder)
        if not message.others:  # dense (or nothing: a shard without variables)
            dense = message.dense
            if dense is None:
                dense = self.xp.zeros(0, self.dtype)
            transport.send(peer, push_key(step, read_version, token, DENSE, then_pull), dense)
            return message.nbytes
        wire = message.for_the_wire(self.arrays, "tcp")  # in host memory
        transport.send(peer, push_key(step, read_version, token, PICKLED, then_pull), pickled(wire))
        return message.nbytes

    def _phases(
        self, step: int, start: float, pulled: float, computed: float, received: int, pushed: dict
    ) -> list[PhaseEvent]:
        last = Phase.DROPPED if pushed["dropped"] else Phase.PS_PUSH
        return [
            PhaseEvent(self.device, Phase.PS_PULL, step, start, pulled, 0, received, self.route),
            PhaseEvent(self.device, Phase.COMPUTE, step, pulled, computed),
            PhaseEvent(
                self.device, last, step, computed, self.clock(), pushed["sent"], 0, self.route
            ),
        ]

    def run(self, first: int, count: int, batches: list | None = None) -> StepReport:
        """Steps ``first`` .. ``first + count - 1``, computed below the shards' threads on a
        CPU host (:mod:`workbench.runtime.compute_priority`)."""
        return below_services(
            lambda: self._run_steps(first, count, batches), self.device, not self.arrays.on_gpu
        )

    def _run_steps(self, first: int, count: int, batches: list | None) -> StepReport:
        events: list[PhaseEvent] = []
        losses: list[tuple[int, float | None]] = []
        staleness, scalars = [], []
        for index, step in enumerate(range(first, first + count)):
            if not may_begin(self.spec.run_id, step):
                break  # the run was stopped (docs/architecture/faults.md, "Faults and stragglers")
            self.current_step = step
            self.memory.begin(self.state)
            start = self.clock()
            versions, received, _ = self._pull(step)
            pulled = self.clock()
            gradients, loss = self.compute(step, batches[index] if batches else None)
            for gradient in gradients.values():  # live until pushed
                self.memory.hold("gradients", gradient)
            computed = self.clock()
            last = step == first + count - 1
            pushed = self._push(step, gradients, versions, then_pull=None if last else step + 1)
            self.memory.end()
            events += self._phases(step, start, pulled, computed, received, pushed)
            losses.append((step, loss))
            staleness.append((step, max(pushed["staleness"], default=0)))
            scalars.append(self._gradient_bytes(step, pushed))
        if losses:
            scalars += self.memory.report(losses[-1][0])
        return {"events": events, "losses": losses, "staleness": staleness, "scalars": scalars}

    def _gradient_bytes(self, step: int, pushed: dict) -> tuple:
        """What this step's pushes would have been uncompressed (the compression summary)."""
        return ("gradient_bytes", step, pushed["dense"], self.device)

    def run_free(self, first: int) -> StepReport:
        """Free-running (async, or sync with backup workers): pull, compute, push at this
        worker's own pace until the shards say the run's updates are spent. Events, losses
        and staleness ride on a push to shard 0 every REPORT_SECONDS, for the client to drain;
        what is left comes back as the task's result. Computed below the shards' threads on a
        CPU host, as :meth:`run` is."""
        return below_services(lambda: self._run_free(first), self.device, not self.arrays.on_gpu)

    def _run_free(self, first: int) -> StepReport:
        sync = self.ps.mode == "sync"
        report = self._empty_report()
        reported = self.clock()
        step = first
        while True:
            self.current_step = step
            self.memory.begin(self.state)
            start = self.clock()
            versions, received, done = self._pull(step, newest_first=sync)
            if done:
                self.memory.end()
                return report
            if sync:  # the newest step the shards are at (past ours when we were late)
                step = versions[0]
            pulled = self.clock()
            gradients, loss = self.compute(step)
            for gradient in gradients.values():  # live until pushed
                self.memory.hold("gradients", gradient)
            computed = self.clock()
            # Async: the next read may be asked for at once (sync asks shard by shard).
            ahead = None if sync else step + 1
            # The report rides to shard 0 when it is due, not with every push: each message
            # wakes the shard, taking a core from whoever computes on a host of few cores.
            due = self.clock() - reported >= REPORT_SECONDS
            pushed = self._push(step, gradients, versions, report if due else None, ahead)
            self.memory.end()
            if due:
                report, reported = self._empty_report(), self.clock()
            report["events"] += self._phases(step, start, pulled, computed, received, pushed)
            # The run's progress in steps: a sync update per step, an async one per push.
            progress = step if sync else max(pushed["version"] - 1, 0) // self.spec.replicas
            report["losses"].append((progress, loss))
            if not pushed["dropped"]:
                report["staleness"].append((progress, max(pushed["staleness"], default=0)))
            report["scalars"].append(self._gradient_bytes(progress, pushed))
            if step % REPORT_EVERY == 0:  # the peak since the last report
                report["scalars"] += self.memory.report(progress)
            step += 1

    def _empty_report(self) -> StepReport:
        return {"device": self.device, "events": [], "losses": [], "staleness": [], "scalars": []}


def run_free_steps(run_id: str, first: int) -> StepReport:
    """Task: this worker's free-running loop for ``run_id`` (see ``run_free``)."""
    return device_service().runs[run_id].run_free(first)


def setup_ps_worker(spec: ParameterServerWorkerSpec) -> str:
    return keep_resident(spec.worker, ParameterServerWorker(spec))
