"""dtrain workbench: distributed deep-learning training, every classic strategy, measured.

The public API in one place. The packages form layers that import only downwards; see
``docs/architecture/index.md`` for the layers, a map of the subsystems (the life of a run
among them) and where each concept lives. The
``tf.distribute``-style classes (``workbench.MirroredStrategy``, ...) exist for every registered
strategy, including ones registered after import.

Each name is imported when first used, so that ``dtrain --help``, a flag typo and
``%load_ext workbench`` answer without importing Dask, Bokeh or the training engine.

Examples
--------
>>> import workbench
>>> result = workbench.run_training(
...     workbench.RunConfig(steps=3, hidden=(16,)), progress=lambda line: None)
>>> result.summary["steps"]
3
"""

from __future__ import annotations

import importlib
from typing import Any

from workbench.models.strategy_scope import (
    compile_model,
    fit_model,
    model_weights,
    register_compile,
    register_fit,
    register_weights,
)

# Where each public name lives; imported on first use (PEP 562).
_API: dict[str, str] = {
    **dict.fromkeys(
        ("Checkpoint", "CheckpointError", "load_checkpoint", "save_checkpoint"),
        "workbench.checkpoint",
    ),
    **dict.fromkeys(("ConfigError", "RunConfig"), "workbench.config"),
    **dict.fromkeys(
        ("Dataset", "DatasetError", "GlobalBatchSampler", "load_dataset"), "workbench.data"
    ),
    **dict.fromkeys(
        (
            "ClusterCoordinator",
            "DistributedDataset",
            "PerReplica",
            "ReduceOp",
            "RemoteValue",
            "StepFunctionError",
            "Strategy",
            "get_replica_context",
        ),
        "workbench.distribute",
    ),
    "EventLog": "workbench.events",
    **dict.fromkeys(("Graph", "GraphBuilder", "gradients", "ops"), "workbench.ir"),
    **dict.fromkeys(("RunResult", "run_training"), "workbench.launch.runner"),
    **dict.fromkeys(
        (
            "Activation",
            "AvgPool2D",
            "Conv2D",
            "Dense",
            "Dropout",
            "Embedding",
            "Flatten",
            "LayerNorm",
            "MaxPool2D",
            "Sequential",
            "build_model",
            "device",
        ),
        "workbench.models",
    ),
    **dict.fromkeys(("LearningRateSchedule", "make_optimizer"), "workbench.optim"),
    "validate_config": "workbench.strategies",
}


def _load_distribute() -> None:
    """Import ``workbench.distribute`` and register its training hooks in place of the ones
    below (explicitly: an import of a module already imported registers nothing, e.g. after
    this package was imported again)."""
    importlib.import_module("workbench.distribute")
    importlib.import_module("workbench.distribute.classes").register_training_hooks()


# ``Sequential.fit``, ``compile`` and ``get_weights`` reach ``workbench.distribute`` through
# these hooks (docs/architecture/index.md, "Layers"). Until it is imported, each hook imports it (it
# registers its own on import) and calls the model layer again, which then reaches the real one.
def _fit(strategy: Any, model: Any, background: bool, **options: Any) -> Any:
    _load_distribute()
    return fit_model(strategy, model, background, **options)


def _compile(strategy: Any, model: Any, options: dict[str, Any]) -> Any:
    _load_distribute()
    return compile_model(strategy, model, options)


def _weights(strategy: Any, model: Any) -> Any:
    _load_distribute()
    return model_weights(strategy, model)


register_fit(_fit)
register_compile(_compile)
register_weights(_weights)


def load_ipython_extension(shell: Any) -> None:
    """``%load_ext workbench``: register the ``%dtrain`` magics."""
    from workbench.notebook.magics import load_ipython_extension as load

    load(shell)


def _strategy_classes() -> dict[str, type]:
    from workbench.distribute import strategy_classes

    return strategy_classes()  # MirroredStrategy, ParameterServerStrategy, ...


def _installed_version() -> str:
    # The one version is extension/package.json's; the build writes it into the installed
    # metadata (pyproject.toml, [tool.hatch.version]), read here only when asked for.
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dtrain-workbench")
    except PackageNotFoundError:
        return "0+unknown"


def __getattr__(name: str) -> Any:
    if name == "__version__":
        value = globals()[name] = _installed_version()
        return value
    if name in _API:
        value = getattr(importlib.import_module(_API[name]), name)
        globals()[name] = value  # later lookups skip this function
        return value
    if name == "__all__":
        return sorted({*_API, *_strategy_classes()})
    classes = _strategy_classes()
    if name in classes:
        return classes[name]
    raise AttributeError(f"module 'workbench' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_API, *_strategy_classes()})


def _jupyter_labextension_paths() -> list[dict]:
    """Where the prebuilt JupyterLab extension (the runs sidebar and chart panels) lives."""
    return [{"src": "labextension", "dest": "dtrain-workbench"}]
