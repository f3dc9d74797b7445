"""The one explicit registry of strategies, by the names ``--strategy`` accepts.

Each entry names the strategy's class by module path and is imported only when a run asks for
it, so validating flags never imports cluster code.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

STRATEGIES: dict[str, str] = {
    "one-device": "workbench.parallel.one_device:OneDeviceStrategy",
    "mirrored": "workbench.parallel.mirrored:MirroredStrategy",
    "central-storage": "workbench.parallel.central_storage:CentralStorageStrategy",
    "multi-worker-mirrored": "workbench.parallel.multi_worker_mirrored:MultiWorkerMirroredStrategy",
    "parameter-server": "workbench.parallel.parameter_server_strategy:ParameterServerStrategy",
    "pipeline": "workbench.parallel.pipeline_strategy:PipelineStrategy",
    "hybrid": "workbench.parallel.pipeline_strategy:HybridStrategy",
    "model-parallel": "workbench.parallel.model_parallel:ModelParallelStrategy",
}
STRATEGY_NAMES: tuple[str, ...] = tuple(STRATEGIES)


def strategy_class(name: str) -> type:
    module, _, attribute = STRATEGIES[name].partition(":")
    return getattr(importlib.import_module(module), attribute)


def _exactly_one_device(config) -> None:
    from workbench.config import ConfigError

    if config.devices != 1:
        raise ConfigError(
            "--devices", f"strategy one-device uses exactly 1 device, got {config.devices}"
        )
    if config.cluster is not None:
        raise ConfigError(
            "--cluster", "strategy one-device runs in this process; use a distributed strategy"
        )


def _replicas_divide_the_batch(config) -> None:
    from workbench.config import ConfigError

    if config.batch_size % config.devices:
        raise ConfigError(
            "--batch-size",
            f"the global batch {config.batch_size} must divide evenly over {config.devices} "
            f"replicas (--devices); try {config.batch_size - config.batch_size % config.devices}"
            f" or {config.batch_size + config.devices - config.batch_size % config.devices}",
        )


def _hosts_fit(config) -> None:
    from workbench.config import ConfigError

    _replicas_divide_the_batch(config)
    if config.hosts > config.devices:
        raise ConfigError(
            "--hosts", f"{config.hosts} hosts need at least as many devices, got {config.devices}"
        )


def _stages_fit(config) -> None:
    from workbench.config import ConfigError

    if config.devices != config.stages:
        raise ConfigError(
            "--devices",
            f"a pipeline puts one stage on each device: --devices {config.devices} "
            f"must equal --stages {config.stages}",
        )
    if config.batch_size % config.microbatches:
        raise ConfigError(
            "--microbatches",
            f"the global batch {config.batch_size} must divide evenly into "
            f"{config.microbatches} micro-batches",
        )


def _mesh_fits(config) -> None:
    from workbench.config import ConfigError

    if config.devices % config.stages or config.devices == config.stages:
        raise ConfigError(
            "--devices",
            f"hybrid needs a 2-D mesh: --devices {config.devices} must be a multiple "
            f"(>= 2x) of --stages {config.stages}",
        )
    replicas = config.devices // config.stages
    if config.batch_size % (replicas * config.microbatches):
        raise ConfigError(
            "--batch-size",
            f"the global batch {config.batch_size} must divide evenly into "
            f"{replicas} replicas x {config.microbatches} micro-batches",
        )


_DEVICE_COUNT_RULES: dict[str, Callable] = {
    "one-device": _exactly_one_device,
    "mirrored": _replicas_divide_the_batch,
    "central-storage": _replicas_divide_the_batch,
    "multi-worker-mirrored": _hosts_fit,
    "parameter-server": _replicas_divide_the_batch,
    "pipeline": _stages_fit,
    "hybrid": _mesh_fits,
    "model-parallel": lambda config: None,  # any device count up to the number of layers
}


def device_count_rule(name: str) -> Callable:
    """The check a strategy makes of ``--devices`` (and related flags) before any work."""
    return _DEVICE_COUNT_RULES.get(name, lambda config: None)
