"""The one replica of a ``one-device`` custom loop, in the calling process.

``one-device``'s ``fit`` runs one fused graph (forward, backward and update); a step function
needs the gradients between the two, so this replica runs the gradient graph the data-parallel
replicas run and then the update graph alone. The variables match ``fit``'s to rounding (the
fused graph orders some sums differently), as every strategy matches ``one-device``'s.
"""

from __future__ import annotations

from typing import Any

from workbench.events.records import Phase, PhaseEvent
from workbench.ir import Executable
from workbench.parallel.custom_loops.replica_context import ReplicaContext
from workbench.parallel.data_parallel.gradient_worker import GradientWorker
from workbench.parallel.worker_spec import WorkerSpec
from workbench.training.graphs import LEARNING_RATE, build_update_graph, gradient_name


class LocalReplicaContext(ReplicaContext):
    def __init__(self, spec: WorkerSpec) -> None:
        worker = GradientWorker(spec)
        super().__init__(worker, 0, 1)
        self.update = Executable(
            build_update_graph(worker.model, worker.optimizer, spec.run_config.dtype)
        )

    def _apply(self, step: int, gradients: dict[str, Any]) -> None:
        worker = self.worker
        start = worker.clock()
        feeds = {gradient_name(name): worker.arrays.adopt(gradients[name]) for name in worker.names}
        feeds[LEARNING_RATE] = worker.learning_rate(step)
        self.update.run(feeds, worker.state, worker.xp)
        self.events.append(PhaseEvent(self.device, Phase.UPDATE, step, start, worker.clock()))
