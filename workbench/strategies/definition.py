"""What a strategy declares: the one shape every strategy has.

A strategy is one module with one :class:`StrategyDefinition` subclass and one line in
``registry.py``. From the definitions alone the workbench derives ``--strategy``'s values, the
flags and their defaults (``dtrain run --help``, ``%dtrain?``), the validation of a
:class:`~workbench.config.RunConfig`, the notebook form's widgets, the ``tf.distribute``-style
classes (``workbench.MirroredStrategy``) and the strategy's fields in the ``--json`` summary.
``docs/architecture/extending.md``, "Adding a strategy", walks through adding one.
"""

from __future__ import annotations

import dataclasses
import re
from abc import ABC, abstractmethod
from typing import Any, ClassVar

from workbench.calibration.probe import TRANSFER_SIZES
from workbench.config import ConfigError, Option, RunConfig, StrategyOptions
from workbench.events import EventLog
from workbench.models import Sequential
from workbench.parallel.pipeline.stages import StageError, split_layers
from workbench.runtime import device_name
from workbench.strategies.options import NoOptions
from workbench.training.job import Progress, TrainingJob, TrainOutcome

_NAME = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")


class StrategyDefinition(ABC):
    """One parallel strategy: its name and options (declared), the rules it puts on a run
    (``check_config``, ``check_model``), the devices it uses, how it trains, and what it adds
    to the summary. Definitions hold no state: each method takes the run's config.

    Subclasses declare ``name`` (what ``--strategy`` takes), ``description`` (one line for the
    help) and ``options`` (the strategy's :class:`~workbench.config.Option` rows, shared rows
    from ``options.py`` or their own), and implement ``check_config`` and ``train``. A
    strategy with options declares ``options_type`` too: the frozen dataclass with a field
    per row that its code reads them from (``config.options_of(...)``).
    """

    name: ClassVar[str]
    description: ClassVar[str]
    options: ClassVar[tuple[Option, ...]]
    options_type: ClassVar[type[StrategyOptions]] = NoOptions
    # How the planner predicts it (``"module:NAME"`` of a
    # ``workbench.planner.strategy_planning.StrategyPlanning``, imported by the planner), or
    # None to say it is not predicted (``dtrain plan`` then says so). Every strategy declares
    # it or inherits its parent's (the strategy tests check).
    planning: ClassVar[str | None]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" not in vars(cls):
            return  # a family base (data parallel, cluster strategies): subclasses declare
        missing = [part for part in ("name", "description", "options") if part not in vars(cls)]
        if missing:
            raise TypeError(f"strategy {cls.__name__} does not declare {', '.join(missing)}")
        if not _NAME.match(cls.name):
            raise TypeError(f"strategy name {cls.name!r} is not lower-case-with-dashes")
        if not all(isinstance(option, Option) for option in cls.options):
            raise TypeError(f"strategy {cls.name}: options must be Option rows")
        _check_options_type(cls.name, cls.options, cls.options_type)

    @property
    def api_name(self) -> str:
        """The Python API class: ``parameter-server`` -> ``ParameterServerStrategy``."""
        return "".join(part.capitalize() for part in self.name.split("-")) + "Strategy"

    @abstractmethod
    def check_config(self, config: RunConfig) -> None:
        """The strategy's device-count rule and any rule across its options: raise
        :class:`~workbench.config.ConfigError` if ``--devices`` (and the options that share
        the devices and the batch out) do not fit. Each option alone is already checked."""

    def check_model(self, config: RunConfig, model: Sequential) -> None:  # noqa: B027
        """Raise :class:`~workbench.config.ConfigError` if ``model`` cannot be trained this
        way (say, fewer layers than stages). Most strategies take any model."""

    def device_names(self, config: RunConfig, device_type: str) -> list[str]:
        """Names of the devices the run uses, in rank order (the events use them)."""
        return [device_name(device_type, task=rank) for rank in range(config.devices)]

    def planned_device_names(self, config: RunConfig) -> list[str]:
        """The device names a plan shows before any worker has said what it has."""
        return self.device_names(config, "gpu" if config.device_type == "gpu" else "cpu")

    # How the devices' tensors travel (``workbench.calibration.probe.WIRES``): what
    # calibration at run start times, so a run pays only for the links it uses.
    wires: ClassVar[tuple[str, ...]] = ("peer",)

    def link_sizes(self, config: RunConfig, device_type: str) -> tuple[int, ...]:
        """The transfer sizes calibration fits this strategy's links to, on ``device_type``
        devices (all of them: its tensors cross the links as they are)."""
        return TRANSFER_SIZES

    def device_batch_sizes(self, config: RunConfig) -> tuple[int, ...]:
        """The batch sizes the run's devices compute on (a replica's share, a micro-batch):
        the shapes calibration times the model at."""
        return (config.batch_size,)

    def graph_plan(self, config: RunConfig, model: Sequential, optimizer: Any) -> Any:
        """The client graph the master places and partitions for this run, for ``dtrain
        plan`` and ``plan_view`` (it has ``describe()`` and ``partitioned``), or None when
        each device builds its own program (between-graph replicas, pipeline stages)."""
        return None

    @abstractmethod
    def train(
        self, config: RunConfig, job: TrainingJob, log: EventLog, progress: Progress
    ) -> TrainOutcome:
        """Train ``job``, recording what every device did in ``log``; return the trained
        variables, gathered on the host, with what the run found out on the way (its device
        type, faults, calibration). ``job`` is only read."""

    def summary_fields(
        self, config: RunConfig, log: EventLog, devices: list[str]
    ) -> dict[str, Any]:
        """What this strategy adds to the ``--json`` summary (bubbles, staleness, ...)."""
        return {}


def _check_options_type(name: str, rows: tuple[Option, ...], typed: type[StrategyOptions]) -> None:
    """Refuse an ``options_type`` that is not a :class:`StrategyOptions` dataclass (frozen,
    as dataclasses deriving from a frozen one must be) with exactly one field per option
    row."""
    if not (isinstance(typed, type) and issubclass(typed, StrategyOptions)):
        raise TypeError(f"strategy {name}: options_type must be a StrategyOptions dataclass")
    fields = sorted(f.name for f in dataclasses.fields(typed))
    declared = sorted(option.name for option in rows)
    if fields != declared:
        raise TypeError(
            f"strategy {name}: options_type {typed.__name__} has the fields "
            f"{', '.join(fields) or 'none'}, its options are {', '.join(declared) or 'none'}; "
            "declare a frozen StrategyOptions dataclass with one field per option"
        )


def layers_fill(model: Sequential, parts: int, flag: str) -> None:
    """Refuse a model with fewer layers than ``parts`` (the stages or devices ``flag`` asks
    for): each part needs at least one layer."""
    try:
        split_layers(model, parts)
    except StageError as error:
        raise ConfigError(
            flag,
            f"{error.parts} {flag.removeprefix('--')} need at least as many layers; "
            f"the model has {error.layers}",
        ) from None


def replicas_divide_the_batch(config: RunConfig) -> None:
    """The device rule of data parallelism: each replica gets an equal share of the batch."""
    if config.batch_size % config.devices:
        below = config.batch_size - config.batch_size % config.devices
        above = config.batch_size + config.devices - config.batch_size % config.devices
        raise ConfigError(
            "--batch-size",
            f"the global batch {config.batch_size} must divide evenly over {config.devices} "
            f"replicas (--devices); try {below} or {above}",
        )
