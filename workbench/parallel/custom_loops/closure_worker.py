"""A parameter-server worker lent to closures a ``ClusterCoordinator`` schedules.

A closure runs on whichever worker Dask gives it. Its first ``compute_gradients`` pulls the
variables from every shard (recording the versions read) and runs the worker's partition of
the parameter-server graph; its gradients are what that partition sends the shards, keyed by
transfer (a partitioned variable's parts apart). ``optimizer_apply`` pushes them to the
shards, which apply them on arrival (async mode) with the staleness the versions give. A
closure that read but did not push is forgotten by the shards when it ends, so its read
bounds no one's staleness.
"""

from __future__ import annotations

from typing import Any, cast

from workbench.events.records import Phase, PhaseEvent
from workbench.parallel.custom_loops.replica_context import ReplicaContext
from workbench.parallel.parameter_server.worker_loop import ParameterServerWorker


class ClosureWorkerContext(ReplicaContext):
    def __init__(self, worker: ParameterServerWorker) -> None:
        super().__init__(worker, worker.spec.rank, worker.spec.replicas)
        self.ps_worker = worker
        self.versions: list[int] | None = None  # what this closure read, until it pushes
        # The worker computes its partition of the parameter-server graph: its gradients are
        # the tensors it sends the shards (variables, or their parts), keyed by transfer.
        self.gradient_shapes = {
            transfer.key: tuple(transfer.shape) for push in worker.pushes for transfer in push
        }

    def compute_gradients(self, model: Any, x: Any, y: Any) -> tuple[float, dict[str, Any]]:
        self._check_model(model, "compute_gradients")
        if self.versions is None:
            self._pull()
        return super().compute_gradients(model, x, y)

    def _pull(self) -> None:
        worker, step = self.ps_worker, self.step
        start = worker.clock()
        self.versions, received, _ = worker._pull(step)
        pulled = worker.clock()
        self.events.append(
            PhaseEvent(self.device, Phase.PS_PULL, step, start, pulled, 0, received, worker.route)
        )

    def _apply(self, step: int, gradients: dict[str, Any]) -> None:
        worker = self.ps_worker
        if self.versions is None:  # gradients from elsewhere: staleness counts from now
            self._pull()
        start = worker.clock()
        pushed = worker._push(step, gradients, cast(list[int], self.versions))  # pulled above
        self.versions = None
        phase = Phase.DROPPED if pushed["dropped"] else Phase.PS_PUSH
        self.events.append(
            PhaseEvent(
                self.device, phase, step, start, worker.clock(), pushed["sent"], 0, worker.route
            )
        )

    def _after_call(self) -> None:
        if self.versions is None:
            return
        self.versions = None
        for shard in range(len(self.ps_worker.ps.shard_devices)):
            self.ps_worker._call(shard, self.step, "forget", worker=self.ps_worker.spec.rank)
