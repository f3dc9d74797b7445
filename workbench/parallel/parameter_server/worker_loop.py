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

    def _pull(self, step: int, newest_first: bool = False) -> tuple[list[int], int, bool]:
        """Every shard's variables into this device's state: (versions, bytes received,
        whether the run's updates are spent). ``newest_first`` (sync, free-running): ask each
        shard for no older a step than the shards before it granted, else the push to it would
        be ahead of it."""
        versions, received, done = [], 0, False
        for shard, bucket in enumerate(self.buckets):
            wanted = max([step, *versions]) if newest_first else step
            reply = self._call(shard, step, "pull", worker=self.spec.rank, step=wanted)
            done = done or reply.get("done", False)
            versions.append(reply["version"])
            values = self.arrays.adopt(reply["values"])
            received += values.nbytes
            for name, value in bucket.unpack(values).items():
                self.state[name][...] = value
        return versions, received, done

    def _push(self, step: int, gradients: dict, versions: list[int], report=None) -> dict:
        """The gradient for each shard: bytes sent, staleness per shard, whether shard 0
        dropped it, and shard 0's version after it (``report`` rides on shard 0's push)."""
        pushed = {"sent": 0, "staleness": [], "dropped": False, "version": versions[0]}
        for shard, bucket in enumerate(self.buckets):
            flat = bucket.pack(gradients, self.xp)
            extra = {"report": report} if shard == 0 and report is not None else {}
            reply = self._call(
                shard,
                step,
                "push",
                worker=self.spec.rank,
                step=step,
                read_version=versions[shard],
                gradients=to_serialize(flat),
                **extra,
            )
            pushed["sent"] += flat.nbytes
            if shard == 0:
                # Shard 0 keeps the run's count: near the end of the budget another shard may
                # take a push shard 0 dropped (or the other way round), as async updates do.
                pushed["dropped"] = reply.get("dropped", False)
                pushed["version"] = reply.get("version", versions[0])
            if reply["staleness"] is not None:
                pushed["staleness"].append(reply["staleness"])
        return pushed

    def _phases(self, step, start, pulled, computed, received, pushed) -> list[tuple]:
        last = "dropped" if pushed["dropped"] else "ps-push"
        return [
            (self.device, "ps-pull", step, start, pulled, 0, received, self.route),
            (self.device, "compute", step, pulled, computed, 0, 0),
            (self.device, last, step, computed, self.clock(), pushed["sent"], 0, self.route),
        ]

    def run(self, first: int, count: int, batches: list | None = None) -> dict[str, Any]:
        events, losses, staleness = [], [], []
        for index, step in enumerate(range(first, first + count)):
            self.current_step = step
            start = self.clock()
            versions, received, _ = self._pull(step)
            pulled = self.clock()
            gradients, loss = self.compute(step, batches[index] if batches else None)
            computed = self.clock()
            pushed = self._push(step, gradients, versions)
            events += self._phases(step, start, pulled, computed, received, pushed)
            losses.append((step, loss))
            staleness.append((step, max(pushed["staleness"], default=0)))
        return {"events": events, "losses": losses, "staleness": staleness}

    def run_free(self, first: int) -> dict[str, Any]:
        """Free-running (async, or sync with backup workers): pull, compute, push at this
        worker's own pace until the shards say the run's updates are spent. Events, losses
        and staleness ride on each push to shard 0, for the client to drain while this runs;
        what is left comes back as the task's result."""
        sync = self.config.mode == "sync"
        report = self._empty_report()
        step = first
        while True:
            self.current_step = step
            start = self.clock()
            versions, received, done = self._pull(step, newest_first=sync)
            if done:
                return report
            if sync:  # the newest step the shards are at (past ours when we were late)
                step = versions[0]
            pulled = self.clock()
            gradients, loss = self.compute(step)
            computed = self.clock()
            pushed = self._push(step, gradients, versions, report)
            report = self._empty_report()
            report["events"] += self._phases(step, start, pulled, computed, received, pushed)
            # The run's progress in steps: a sync update per step, an async one per push.
            progress = step if sync else max(pushed["version"] - 1, 0) // self.spec.replicas
            report["losses"].append((progress, loss))
            if not pushed["dropped"]:
                report["staleness"].append((progress, max(pushed["staleness"], default=0)))
            step += 1

    def _empty_report(self) -> dict[str, Any]:
        return {"device": self.device, "events": [], "losses": [], "staleness": []}


def run_free_steps(run_id: str, first: int) -> dict[str, Any]:
    """Task: this worker's free-running loop for ``run_id`` (see ``run_free``)."""
    return device_service().runs[run_id].run_free(first)


def setup_ps_worker(spec: ParameterServerWorkerSpec) -> str:
    device_service().runs[spec.worker.run_id] = ParameterServerWorker(spec)
    return spec.worker.device_names[spec.worker.rank]
