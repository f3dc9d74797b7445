"""dtrain workbench: distributed deep-learning training, every classic strategy, measured.

The public API in one place. The packages form layers that import only downwards; see
``docs/architecture.md`` for the layers, the life of a run and where each concept lives. The
``tf.distribute``-style classes (``workbench.MirroredStrategy``, ...) exist for every registered
strategy, including ones registered after import.

Examples
--------
>>> import workbench
>>> result = workbench.run_training(
...     workbench.RunConfig(steps=3, hidden=(16,)), progress=lambda line: None)
>>> result.summary["steps"]
3
"""

from workbench.checkpoint import Checkpoint, CheckpointError, load_checkpoint, save_checkpoint
from workbench.config import ConfigError, RunConfig
from workbench.data import Dataset, DatasetError, GlobalBatchSampler, load_dataset
from workbench.distribute import (
    ClusterCoordinator,
    DistributedDataset,
    PerReplica,
    ReduceOp,
    RemoteValue,
    StepFunctionError,
    Strategy,
    get_replica_context,
    strategy_classes,
)
from workbench.events import EventLog
from workbench.ir import Graph, GraphBuilder, gradients, ops
from workbench.launch.runner import RunResult, run_training
from workbench.models import (
    Activation,
    AvgPool2D,
    Conv2D,
    Dense,
    Dropout,
    Embedding,
    Flatten,
    LayerNorm,
    MaxPool2D,
    Sequential,
    build_model,
    device,
)
from workbench.optim import LearningRateSchedule, make_optimizer
from workbench.strategies import validate_config

__version__ = "0.1.0"


def load_ipython_extension(shell) -> None:
    """``%load_ext workbench``: register the ``%dtrain`` magics."""
    from workbench.notebook.magics import load_ipython_extension as load

    load(shell)


__all__ = [
    "Activation",
    "AvgPool2D",
    "Checkpoint",
    "CheckpointError",
    "ClusterCoordinator",
    "ConfigError",
    "Conv2D",
    "Dataset",
    "DatasetError",
    "Dense",
    "DistributedDataset",
    "Dropout",
    "Embedding",
    "EventLog",
    "Flatten",
    "GlobalBatchSampler",
    "Graph",
    "GraphBuilder",
    "LayerNorm",
    "LearningRateSchedule",
    "MaxPool2D",
    "PerReplica",
    "ReduceOp",
    "RemoteValue",
    "RunConfig",
    "RunResult",
    "Sequential",
    "StepFunctionError",
    "Strategy",
    "build_model",
    "device",
    "get_replica_context",
    "gradients",
    "load_checkpoint",
    "load_dataset",
    "make_optimizer",
    "ops",
    "run_training",
    "save_checkpoint",
    "validate_config",
    *strategy_classes(),  # MirroredStrategy, ParameterServerStrategy, ...
]


def __getattr__(name: str):
    classes = strategy_classes()
    if name in classes:
        return classes[name]
    raise AttributeError(f"module 'workbench' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *strategy_classes()})


def _jupyter_labextension_paths() -> list[dict]:
    """Where the prebuilt JupyterLab extension (the runs sidebar and chart panels) lives."""
    return [{"src": "labextension", "dest": "dtrain-workbench"}]
