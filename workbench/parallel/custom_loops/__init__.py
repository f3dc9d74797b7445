"""Custom training loops on the devices: ``strategy.run(step_fn)`` and closures scheduled by a
``ClusterCoordinator`` (the Python API in ``workbench.distribute`` drives them).

What flows in: the user's step function (cloudpickled), this replica's share of the arguments,
and, once at setup, the strategy's own device program (a data-parallel ``Replica``, a
parameter-server worker), which a :class:`ReplicaContext` wraps. What flows out: the step
function's return value and the phases it ran. Inside the step function,
``model.compute_gradients(x, y)`` and ``model.optimizer_apply(gradients)`` reach the context
through ``workbench.models.strategy_scope.replica_scope``, and the context combines the
gradients the way the strategy's ``fit`` does (the same buckets, collectives, scaling and update
graph), so a loop over ``fit``'s batches ends with ``fit``'s variables bit for bit.
"""

from workbench.parallel.custom_loops.closure_worker import ClosureWorkerContext
from workbench.parallel.custom_loops.local_replica import LocalReplicaContext
from workbench.parallel.custom_loops.mirrored_replica import MirroredReplicaContext
from workbench.parallel.custom_loops.replica_context import (
    ReplicaContext,
    StepFunctionError,
    run_step_function,
    setup_custom_loop,
)

__all__ = [
    "ClosureWorkerContext",
    "LocalReplicaContext",
    "MirroredReplicaContext",
    "ReplicaContext",
    "StepFunctionError",
    "run_step_function",
    "setup_custom_loop",
]
