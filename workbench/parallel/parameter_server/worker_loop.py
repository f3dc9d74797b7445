"""A parameter-server worker (TF's ``/job:worker/task:n``): pull, compute, push, every step.

Pulls go to the shards in shard order (a fixed order, like lock ordering, so bounded-staleness
waits can never form a cycle); each pull is answered with the shard's variables and the
version they are at; the gradient for each shard is pushed with the version it was computed
from, which is how the shard measures staleness.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from distributed.protocol import to_serialize
from distributed.utils import sync

from workbench.parallel.collectives import StallError
from workbench.parallel.data_parallel.gradient_worker import GradientWorker
from workbench.parallel.parameter_server.shard_service import shard_bucket
from workbench.parallel.worker_spec import WorkerSpec
from workbench.runtime.peer_transport import route, wire_of
from workbench.runtime.worker_service import CALL_HANDLER, device_service


@dataclass(frozen=True)
class ParameterServerWorkerSpec:
    worker: WorkerSpec
    shard_addresses: tuple[str, ...]
    shard_devices: tuple[str, ...]
    shard_names: tuple[tuple[str, ...], ...]


class ParameterServerWorker(GradientWorker):
    def __init__(self, spec: ParameterServerWorkerSpec) -> None:
        super().__init__(spec.worker)
        self.ps = spec
        shapes = self.model.parameter_shapes()
        itemsize = np.dtype(self.config.dtype).itemsize
        self.buckets = [shard_bucket(shapes, names, itemsize) for names in spec.shard_names]
        self._worker = device_service().worker
        # Pulls and pushes are RPCs over Dask's comms; device arrays ride its serializers.
        self.route = route(self.arrays.on_gpu, wire_of(self._worker.address))

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

    def run(self, first: int, count: int, batches: list | None = None) -> dict[str, Any]:
        events, losses, staleness = [], [], []
        for index, step in enumerate(range(first, first + count)):
            self.current_step = step
            start = self.clock()
            versions, received = [], 0
            for shard, bucket in enumerate(self.buckets):
                reply = self._call(shard, step, "pull", worker=self.spec.rank, step=step)
                versions.append(reply["version"])
                values = self.arrays.adopt(reply["values"])
                received += values.nbytes
                for name, value in bucket.unpack(values).items():
                    self.state[name][...] = value
            pulled = self.clock()
            gradients, loss = self.compute(step, batches[index] if batches else None)
            computed = self.clock()
            sent, stale = 0, []
            for shard, bucket in enumerate(self.buckets):
                flat = bucket.pack(gradients, self.xp)
                reply = self._call(
                    shard,
                    step,
                    "push",
                    worker=self.spec.rank,
                    step=step,
                    read_version=versions[shard],
                    gradients=to_serialize(flat),
                )
                sent += flat.nbytes
                if reply["staleness"] is not None:
                    stale.append(reply["staleness"])
            pushed = self.clock()
            events += [
                (self.device, "ps-pull", step, start, pulled, 0, received, self.route),
                (self.device, "compute", step, pulled, computed, 0, 0),
                (self.device, "ps-push", step, computed, pushed, sent, 0, self.route),
            ]
            losses.append((step, loss))
            staleness.append((step, max(stale) if stale else 0))
        return {"events": events, "losses": losses, "staleness": staleness}

    def run_free(self, first: int) -> dict[str, Any]:
        """Free-running (async, or sync with backup workers): pull, compute, push at this
        worker's own pace until the shards say the run's updates are spent. Events, losses
        and staleness ride on each push to shard 0, for the client to drain while this runs;
        what is left comes back as the task's result."""
        sync = self.config.mode == "sync"
        report = {"device": self.device, "events": [], "losses": [], "staleness": []}
        step = first
        while True:
            self.current_step = step
            start = self.clock()
            versions, received, done = [], 0, False
            for shard, bucket in enumerate(self.buckets):
                # Sync: no older step than another shard already granted (else our push to
                # this shard would be ahead of it).
                wanted = max([step, *versions]) if sync else step
                reply = self._call(shard, step, "pull", worker=self.spec.rank, step=wanted)
                done = done or reply["done"]
                versions.append(reply["version"])
                values = self.arrays.adopt(reply["values"])
                received += values.nbytes
                for name, value in bucket.unpack(values).items():
                    self.state[name][...] = value
            if done:
                return report
            if sync:  # the newest step the shards are at (past ours when we were late)
                step = versions[0]
            pulled = self.clock()
            gradients, loss = self.compute(step)
            computed = self.clock()
            sent, stale, dropped, applied_version = 0, [], False, versions[0]
            for shard, bucket in enumerate(self.buckets):
                flat = bucket.pack(gradients, self.xp)
                shipped = report if shard == 0 else None
                reply = self._call(
                    shard,
                    step,
                    "push",
                    worker=self.spec.rank,
                    step=step,
                    read_version=versions[shard],
                    gradients=to_serialize(flat),
                    report=shipped,
                )
                if shipped is not None:
                    report = {"device": self.device, "events": [], "losses": [], "staleness": []}
                    applied_version = reply["version"]
                sent += flat.nbytes
                dropped = dropped or reply["dropped"]
                if reply["staleness"] is not None:
                    stale.append(reply["staleness"])
            pushed = self.clock()
            report["events"] += [
                (self.device, "ps-pull", step, start, pulled, 0, received, self.route),
                (self.device, "compute", step, pulled, computed, 0, 0),
                (
                    self.device,
                    "dropped" if dropped else "ps-push",
                    step,
                    computed,
                    pushed,
                    sent,
                    0,
                    self.route,
                ),
            ]
            # The run's progress in steps: a sync update per step, an async one per push.
            progress = step if sync else max(applied_version - 1, 0) // self.spec.replicas
            report["losses"].append((progress, loss))
            if not dropped:
                report["staleness"].append((progress, max(stale) if stale else 0))
            step += 1


def run_free_steps(run_id: str, first: int) -> dict[str, Any]:
    """Task: this worker's free-running loop for ``run_id`` (see ``run_free``)."""
    return device_service().runs[run_id].run_free(first)


def setup_ps_worker(spec: ParameterServerWorkerSpec) -> str:
    device_service().runs[spec.worker.run_id] = ParameterServerWorker(spec)
    return spec.worker.device_names[spec.worker.rank]
