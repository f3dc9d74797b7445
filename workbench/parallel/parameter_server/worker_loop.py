"""A parameter-server worker (TF's ``/job:worker/task:n``): pull, compute, push, every step.

What it computes is its partition of the parameter-server client graph
(``client_graph.py``): the partition's recvs are fed by the pulls, its sends are what the
pushes carry. Pulls go to the shards in shard order (a fixed order, like lock ordering, so
bounded-staleness waits can never form a cycle); each pull is answered with the shard's
variables and the version they are at; the gradient for each shard is pushed with the version
it was computed from, which is how the shard measures staleness.

With ``--accumulate K`` a worker runs its partition K times between a pull and a push, on
consecutive slices of its rows, and pushes the mean of the K gradients: one pull and one push
per step (or, async, per push), sync and async alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from distributed.protocol import to_serialize
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
from workbench.parallel.parameter_server.messages import (
    dense_bytes,
    encode_push,
    unpack_pull,
)
from workbench.parallel.parameter_server.partitioner import VariablePiece
from workbench.parallel.parameter_server.table_rendezvous import TableRendezvous
from workbench.parallel.resident_steps import keep_resident
from workbench.parallel.stop_gate import may_begin
from workbench.parallel.towers import feed_parts
from workbench.parallel.worker_spec import WorkerSpec
from workbench.runtime.device_memory import REPORT_EVERY
from workbench.runtime.peer_transport import route, wire_of
from workbench.runtime.worker_service import CALL_HANDLER, device_service
from workbench.training.gradient_accumulation import GradientSum, mean_loss, micro_slices
from workbench.training.graphs import DROPOUT_SEED, INPUTS, LABELS
from workbench.training.session import dropout_seed


@dataclass(frozen=True)
class ParameterServerWorkerSpec:
    worker: WorkerSpec
    shard_addresses: tuple[str, ...]
    shard_devices: tuple[str, ...]
    pieces: tuple[VariablePiece, ...]  # the variables (or parts) and their shards
    # In-graph replication: the client's one graph, this worker running tower ``worker.rank``.
    # Between-graph (None): the worker builds its own graph, one tower.
    client_graph: ParameterServerGraph | None = None
    mode: str = "sync"  # --mode: sync or async
    compression: str = "none"  # --compression of the pushes (canonical)


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
        # Pulls and pushes are RPCs over Dask's comms; device arrays ride its serializers.
        self.wire = wire_of(self._worker.address)
        self.route = route(self.arrays.on_gpu, self.wire)

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

    def _pull(self, step: int, newest_first: bool = False) -> tuple[list[int], int, bool]:
        """Every shard's sends to this worker, ready for the partition's recvs: (versions,
        bytes received, whether the run's updates are spent). ``newest_first`` (sync,
        free-running): ask each shard for no older a step than the shards before it granted,
        else the push to it would be ahead of it."""
        versions: list[int] = []
        received, done = 0, False
        self.rendezvous.received = {}
        for shard, transfers in enumerate(self.pulls):
            wanted = max([step, *versions]) if newest_first else step
            reply = self._call(shard, step, "pull", worker=self.spec.rank, step=wanted)
            done = done or reply.get("done", False)
            versions.append(reply["version"])
            values = self.arrays.adopt(reply["values"])
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
        self, step: int, gradients: dict, versions: list[int], report: StepReport | None = None
    ) -> dict:
        """The gradients for each shard: bytes sent, staleness per shard, whether shard 0
        dropped it, and shard 0's version after it (``report`` rides on shard 0's push)."""
        pushed: dict[str, Any] = {"sent": 0, "dense": 0, "staleness": [], "dropped": False}
        pushed["version"] = versions[0]
        for shard, transfers in enumerate(self.pushes):
            message = encode_push(
                gradients, transfers, self.graph.row_sparse, self.xp, self.encoder
            )
            # Pickled, as the gradients are: the comm would turn its PhaseEvents into lists.
            extra = {"report": to_serialize(report)} if shard == 0 and report is not None else {}
            reply = self._call(
                shard,
                step,
                "push",
                worker=self.spec.rank,
                step=step,
                read_version=versions[shard],
                gradients=to_serialize(message.for_the_wire(self.arrays, self.wire)),
                **extra,
            )
            pushed["sent"] += message.nbytes
            pushed["dense"] += dense_bytes(transfers)
            if shard == 0:
                # Shard 0 keeps the run's count: near the end of the budget another shard may
                # take a push shard 0 dropped (or the other way round), as async updates do.
                pushed["dropped"] = reply.get("dropped", False)
                pushed["version"] = reply.get("version", versions[0])
            if reply["staleness"] is not None:
                pushed["staleness"].append(reply["staleness"])
        return pushed

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
            pushed = self._push(step, gradients, versions)
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
        and staleness ride on each push to shard 0, for the client to drain while this runs;
        what is left comes back as the task's result."""
        sync = self.ps.mode == "sync"
        report = self._empty_report()
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
            pushed = self._push(step, gradients, versions, report)
            self.memory.end()
            report = self._empty_report()
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
