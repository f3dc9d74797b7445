"""The Python API in ``tf.distribute``'s shape: pick a strategy, build the model in its scope,
call ``fit`` or write the training loop yourself.

    strategy = workbench.MirroredStrategy(devices=2, allreduce="ring")
    with strategy.scope():
        model = workbench.Sequential([workbench.Flatten(), workbench.Dense(10)],
                                     input_shape=(1, 8, 8))
    result = model.fit(dataset="digits", epochs=2, batch_size=64)

There is one class per registered strategy (``workbench.MirroredStrategy``,
``workbench.ParameterServerStrategy``, ...), made from its definition (``classes.py``): its
constructor takes the placement options every distributed run has (``devices`` as a count or a
list of names, ``device_type``, ``cluster``, ``stall_timeout``) and the strategy's own options;
``fit`` takes the rest. Everything is checked by the same
:func:`~workbench.strategies.validate_config` as the command line and ``%dtrain``, and
``%dtrain`` starts its runs through :func:`start` here. As in TensorFlow, the global batch is
the per-replica batch times the replicas: ``batch_size`` is global.

Custom training loops (``strategy.py``, ``loops.py``): ``model.compile(**fit_options)``, then
``strategy.run(step_fn, args=(per_replica_batch,))`` calls ``step_fn`` on every replica's
device, where ``model.compute_gradients`` and ``model.optimizer_apply`` train it exactly as
``fit`` would; ``strategy.experimental_distribute_dataset`` yields ``fit``'s batches as
:class:`PerReplica` values (``datasets.py``), ``strategy.reduce`` combines results
(``values.py``). A parameter server's workers run closures a :class:`ClusterCoordinator`
schedules (``coordinator.py``). The device side is :mod:`workbench.parallel.custom_loops`.
"""

from __future__ import annotations

from workbench.distribute.classes import (
    PLACEMENT_OPTIONS,
    api_class,
    one_device_strategy,
    strategy_classes,
)
from workbench.distribute.coordinator import ClusterCoordinator, RemoteValue
from workbench.distribute.datasets import DistributedDataset
from workbench.distribute.runs import start
from workbench.distribute.strategy import Strategy
from workbench.distribute.values import PerReplica, ReduceOp
from workbench.models.strategy_scope import current_replica_context, current_strategy
from workbench.parallel.custom_loops import StepFunctionError


def get_replica_context():
    """The replica context of the step function running here (its
    ``replica_id_in_sync_group``, ``num_replicas_in_sync``, ``device``), or None outside one.

    Examples
    --------
    >>> get_replica_context() is None
    True
    """
    return current_replica_context()


def __getattr__(name: str) -> type[Strategy]:
    classes = strategy_classes()
    if name in classes:
        return classes[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "PLACEMENT_OPTIONS",
    "ClusterCoordinator",
    "DistributedDataset",
    "PerReplica",
    "ReduceOp",
    "RemoteValue",
    "StepFunctionError",
    "Strategy",
    "api_class",
    "current_strategy",
    "get_replica_context",
    "one_device_strategy",
    "start",
    "strategy_classes",
]
