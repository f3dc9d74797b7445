"""The Python API in ``tf.distribute``'s shape: pick a strategy, build the model in its scope,
call ``fit``.

    strategy = workbench.MirroredStrategy(devices=2, allreduce="ring")
    with strategy.scope():
        model = workbench.Sequential([workbench.Flatten(), workbench.Dense(10)],
                                     input_shape=(1, 8, 8))
    result = model.fit(dataset="digits", epochs=2, batch_size=64)

Each strategy is a :class:`~workbench.config.RunConfig` in the making: its constructor takes the
options of its family (the flags of ``dtrain run``), ``fit`` the rest. Everything is checked by
the same :func:`~workbench.config.validate_config` as the command line and ``%dtrain``, and
``%dtrain`` starts its runs through :func:`start` here. As in TensorFlow, the global batch is
the per-replica batch times the replicas: ``batch_size`` is global.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any

from workbench.config import ConfigError, RunConfig

_current: contextvars.ContextVar[Strategy | None] = contextvars.ContextVar(
    "dtrain_strategy", default=None
)


def current_strategy() -> Strategy | None:
    """The strategy whose ``scope()`` encloses the caller, if any."""
    return _current.get()


class Strategy:
    """A parallel strategy and its options (``strategy`` names it as ``--strategy`` does)."""

    strategy = "one-device"
    options: tuple[str, ...] = ()  # RunConfig fields the constructor accepts

    def __init__(self, **options: Any) -> None:
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            allowed = ", ".join(self.options) or "none"
            raise ConfigError(
                unknown[0], f"is not an option of {type(self).__name__} (options: {allowed})"
            )
        self.settings = {"strategy": self.strategy, **options}

    @contextlib.contextmanager
    def scope(self) -> Iterator[Strategy]:
        """Models built inside train with this strategy when their ``fit`` is called."""
        token = _current.set(self)
        try:
            yield self
        finally:
            _current.reset(token)

    def config(self, **fit_options: Any) -> RunConfig:
        """The run this strategy and ``fit_options`` describe (checked)."""
        from workbench.config import validate_config

        fields = set(RunConfig.__dataclass_fields__) - {"strategy", "extra", "json"}
        for name in fit_options:
            if name not in fields:
                allowed = ", ".join(sorted(fields))
                raise ConfigError(name, f"is not a fit option (options: {allowed})")
            if name in self.settings:
                raise ConfigError(name, f"is set by {type(self).__name__}; give it there only")
        options = {**self.settings, **fit_options}
        if "hidden" in options:
            options["hidden"] = tuple(options["hidden"])
        return validate_config(RunConfig(**options))

    def fit(self, model=None, background: bool = False, **fit_options: Any):
        """Train ``model`` (a ``Sequential``; None: the ``model`` preset option). Returns the
        :class:`~workbench.training.runner.RunResult`, or with ``background=True`` a
        :class:`~workbench.notebook.BackgroundRun` at once."""
        return start(self.config(**fit_options), model, background=background)

    def __repr__(self) -> str:
        options = ", ".join(f"{k}={v!r}" for k, v in self.settings.items() if k != "strategy")
        return f"{type(self).__name__}({options})"


def start(
    config: RunConfig, model=None, background: bool = True, progress=None, panel: bool = False
):
    """Start a checked run: in a background thread (a ``BackgroundRun``) or here. With
    ``panel``, the run's live panel is built before training starts (it is costly to build,
    and would otherwise compete with the run's first seconds)."""
    if background:
        from workbench.notebook.background_run import BackgroundRun

        run = BackgroundRun(config, model=model, progress=progress, begin=False)
        if panel:
            run.panel()
        return run.begin()
    from workbench.training.runner import run_training

    return run_training(config, model=model, progress=progress or (lambda line: None))


class OneDeviceStrategy(Strategy):
    strategy = "one-device"
    options = ("device_type",)


class MirroredStrategy(Strategy):
    """Sync data parallel on one host; ``allreduce``: ring, hierarchical-copy, reduce-to-one."""

    strategy = "mirrored"
    options = ("devices", "allreduce", "bucket_mb", "compression", "device_type", "cluster")


class CentralStorageStrategy(Strategy):
    strategy = "central-storage"
    options = ("devices", "device_type", "cluster")


class MultiWorkerMirroredStrategy(Strategy):
    strategy = "multi-worker-mirrored"
    options = ("devices", "hosts", "bucket_mb", "compression", "device_type", "cluster")


class ParameterServerStrategy(Strategy):
    """``ps`` shards; ``mode`` sync or async; ``staleness`` bounds async updates."""

    strategy = "parameter-server"
    options = ("devices", "ps", "mode", "staleness", "replication", "device_type", "cluster")


class ModelParallelStrategy(Strategy):
    strategy = "model-parallel"
    options = ("devices", "device_type", "cluster")


class PipelineStrategy(Strategy):
    """``stages`` devices, ``microbatches`` per batch, ``schedule`` gpipe or 1f1b."""

    strategy = "pipeline"
    options = ("devices", "stages", "microbatches", "schedule", "device_type", "cluster")


class HybridStrategy(Strategy):
    strategy = "hybrid"
    options = ("devices", "stages", "microbatches", "schedule", "device_type", "cluster")


STRATEGY_CLASSES = {
    cls.strategy: cls
    for cls in (
        OneDeviceStrategy,
        MirroredStrategy,
        CentralStorageStrategy,
        MultiWorkerMirroredStrategy,
        ParameterServerStrategy,
        ModelParallelStrategy,
        PipelineStrategy,
        HybridStrategy,
    )
}
