"""dtrain workbench: distributed deep-learning training, every classic strategy, measured.

The public API in one place. Subsystems, in pipeline order: :mod:`workbench.ir` (graph,
autodiff, interpreter) -> :mod:`workbench.passes` (prune, fold, CSE) -> :mod:`workbench.parallel`
(strategies) -> :mod:`workbench.runtime` (devices) -> :mod:`workbench.events`. Around them:
:mod:`workbench.models`, :mod:`workbench.optim`, :mod:`workbench.data`,
:mod:`workbench.checkpoint`, :mod:`workbench.training` and the ``dtrain`` command line.

Examples
--------
>>> import workbench
>>> result = workbench.run_training(
...     workbench.RunConfig(steps=3, hidden=(16,)), progress=lambda line: None)
>>> result.summary["steps"]
3
"""

from workbench.checkpoint import Checkpoint, CheckpointError, load_checkpoint, save_checkpoint
from workbench.config import ConfigError, RunConfig, validate_config
from workbench.data import Dataset, DatasetError, GlobalBatchSampler, load_dataset
from workbench.distribute import (
    CentralStorageStrategy,
    HybridStrategy,
    MirroredStrategy,
    ModelParallelStrategy,
    MultiWorkerMirroredStrategy,
    OneDeviceStrategy,
    ParameterServerStrategy,
    PipelineStrategy,
    Strategy,
)
from workbench.events import EventLog
from workbench.ir import Graph, GraphBuilder, gradients, ops
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
from workbench.training.runner import RunResult, run_training

__version__ = "0.1.0"


def load_ipython_extension(shell) -> None:
    """``%load_ext workbench``: register the ``%dtrain`` magics."""
    from workbench.notebook.magics import load_ipython_extension as load

    load(shell)


__all__ = [
    "Activation",
    "AvgPool2D",
    "CentralStorageStrategy",
    "Checkpoint",
    "CheckpointError",
    "ConfigError",
    "Conv2D",
    "Dataset",
    "DatasetError",
    "Dense",
    "Dropout",
    "Embedding",
    "EventLog",
    "Flatten",
    "GlobalBatchSampler",
    "Graph",
    "GraphBuilder",
    "HybridStrategy",
    "LayerNorm",
    "LearningRateSchedule",
    "MaxPool2D",
    "MirroredStrategy",
    "ModelParallelStrategy",
    "MultiWorkerMirroredStrategy",
    "OneDeviceStrategy",
    "ParameterServerStrategy",
    "PipelineStrategy",
    "RunConfig",
    "RunResult",
    "Sequential",
    "Strategy",
    "build_model",
    "device",
    "gradients",
    "load_checkpoint",
    "load_dataset",
    "make_optimizer",
    "ops",
    "run_training",
    "save_checkpoint",
    "validate_config",
]


def _jupyter_labextension_paths() -> list[dict]:
    """Where the prebuilt JupyterLab extension (the runs sidebar and chart panels) lives."""
    return [{"src": "labextension", "dest": "dtrain-workbench"}]
