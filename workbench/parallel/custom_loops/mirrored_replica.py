"""A data-parallel replica lent to step functions: ``mirrored``, ``multi-worker-mirrored`` and
``central-storage`` custom loops.

``optimizer_apply`` does what the replica's own step does after its backward pass: the same
fusion buckets reduced by the same codec and algorithm on the same communication thread, the
sum scaled by 1/N, the loss scaler consulted, the same update graph at the same step's learning
rate (or, for central storage, the push to the storage device, its update and the broadcast).
Only the moment the buckets start differs: ``fit`` starts each one as backward completes it, a
step function after it returns, when the user may have changed the gradients. A bucket's sum
does not depend on when it started, so the variables are ``fit``'s bit for bit.
"""

from __future__ import annotations

from typing import Any

from workbench.events.records import Phase, PhaseEvent
from workbench.parallel.custom_loops.replica_context import ReplicaContext
from workbench.parallel.data_parallel.replica import Replica


class MirroredReplicaContext(ReplicaContext):
    def __init__(self, replica: Replica) -> None:
        super().__init__(replica, replica.spec.rank, replica.spec.replicas)
        self.replica = replica

    def _apply(self, step: int, gradients: dict[str, Any]) -> None:
        replica = self.replica
        replica.transport.step = step
        start = replica.clock()
        if replica.replica_spec.central_storage:
            phases, _ = replica._central_update(step, gradients, start, start)
            # The compute phase is logged already.
            self.events += [event for event in phases if event.phase != Phase.COMPUTE]
            return
        transport = replica.transport
        sent, received = transport.bytes_sent, transport.bytes_received
        # Every replica submits the buckets in the same order to its one communication thread,
        # so the collectives pair up as they do in fit.
        reductions = []
        for index, bucket in enumerate(replica.buckets):
            flat = bucket.pack(gradients, replica.xp)  # a new buffer: the user's stay as given
            replica._simulate_overflow(step, flat)
            future = replica.communication.submit(replica._reduce, flat, f"s{step}/b{index}", index)
            reductions.append((index, future, start))
        averaged, applied = replica._finish_reductions(step, reductions)
        reduced = replica.clock()
        if applied:  # False: the loss scaler skips the step on every replica alike
            replica._apply(step, averaged)
        traffic = (transport.bytes_sent - sent, transport.bytes_received - received)
        self.events += [
            PhaseEvent(self.device, Phase.ALLREDUCE, step, start, reduced, *traffic, replica.path),
            PhaseEvent(self.device, Phase.UPDATE, step, reduced, replica.clock()),
        ]
