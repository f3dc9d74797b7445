"""The run configuration shared by ``dtrain run``, ``%dtrain`` and the Python API.

A :class:`RunConfig` holds the options every run has (model, data, optimizer, devices, ...)
as fields, and the options of its strategy (``allreduce``, ``ps``, ``stages``, ...) twice
over: in ``options``, by name (what the flags, the JSON records and the displays use), and,
once validated, as the strategy's typed :class:`StrategyOptions` (a frozen dataclass per
strategy), read as ``config.options_of(PipelineOptions).stages`` so that a type checker sees
each option's name and type. Each option is declared once, as an :class:`Option` row: the
run options in :data:`RUN_OPTIONS` below, a strategy's in ``workbench.strategies.options``
with the dataclass that types them. The flag parser, the notebook's form, the Python API and
the checks are derived from those rows.

This module checks the run options; ``workbench.strategies.validate_config`` checks a whole
configuration (the strategy's options and device rule too), before any data is loaded or any
cluster starts. Each :class:`ConfigError` names the flag and the allowed values.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import stat
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from workbench.data import DATASET_FORMS, DatasetError, parse_dataset_spec
from workbench.models import MODEL_NAMES
from workbench.optim import DECAY_RULES, OPTIMIZER_NAMES, SCALING_RULES

DTYPE_NAMES = ("float32", "float64")
PRECISION_NAMES = ("fp32", "mixed-fp16", "mixed-bf16")
DEVICE_TYPE_NAMES = ("auto", "cpu", "gpu")
PROTOCOL_NAMES = ("tcp", "ucx")
CLUSTER_SCHEMES = ("tcp", "tls", "ucx", "ucxx")
# Counts (steps, seeds, devices, micro-batches) beyond a 32-bit integer are typos, and overflow
# the int32/int64 arithmetic of schedules and samplers.
MAX_INTEGER_OPTION = 2**31 - 1
DEFAULT_EPOCHS = 10


class ConfigError(ValueError):
    """An invalid flag or option; ``field`` is the flag as the user typed it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def _finite_number(value: Any) -> bool:
    """An int or float that is neither NaN nor infinite (``float("1e400")`` is infinite)."""
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value)


def unknown_value(noun: str, value: Any, allowed: tuple[str, ...]) -> str:
    """The refusal of a value not among ``allowed``: the allowed values, and the closest one
    when the value looks like a typo of it.

    Examples
    --------
    >>> unknown_value("strategy", "mirored", ("one-device", "mirrored"))
    "unknown strategy 'mirored'; choose one of: one-device, mirrored; did you mean 'mirrored'?"
    """
    text = f"unknown {noun} {value!r}; choose one of: {', '.join(allowed)}"
    return text + did_you_mean(value, allowed)


def did_you_mean(value: Any, allowed: tuple[str, ...]) -> str:
    """``"; did you mean 'X'?"`` for the allowed value closest to ``value``, or ``""``."""
    close = difflib.get_close_matches(value, allowed, n=1) if isinstance(value, str) else []
    return f"; did you mean {close[0]!r}?" if close else ""


def flag_of(name: str) -> str:
    """The command-line flag of an option name (``bucket_mb`` -> ``--bucket-mb``)."""
    return "--" + name.replace("_", "-")


@dataclass(frozen=True)
class Option:
    """One option of a run: its name (a :class:`RunConfig` field, or a field of its strategy's
    :class:`StrategyOptions`, and a Python keyword), type, default, allowed values or minimum,
    and help. ``flag`` is derived from the name.

    Examples
    --------
    >>> Option("bucket_mb", float, 25.0, "fusion bucket size in MiB", minimum=0.001).flag
    '--bucket-mb'
    >>> try:
    ...     Option("mode", str, "sync", "update mode", choices=("sync", "async")).check("x")
    ... except ConfigError as error:
    ...     print(error)
    --mode: unknown mode 'x'; choose one of: sync, async
    """

    name: str
    type: type
    default: Any
    help: str
    choices: tuple[str, ...] | None = None
    minimum: float | None = None
    optional: bool = False  # None is a value (e.g. unbounded staleness)
    parse: Callable[[str], Any] | None = None  # text -> value, where ``type`` is not enough
    noun: str | None = None  # what a value is called in messages (default: the name)
    label: str | None = None  # the notebook form's label (default: the name)
    applies_with: str | None = None  # what else it needs, e.g. "--mode async"
    repeatable: bool = False  # the flag may be given several times; the value is a tuple

    @property
    def flag(self) -> str:
        return flag_of(self.name)

    @property
    def form_label(self) -> str:
        return self.label or self.name.replace("_", " ")

    def check(self, value: Any) -> None:
        """Raise :class:`ConfigError` naming the flag if ``value`` is not allowed."""
        if value is None and self.optional:
            return
        if self.type is bool and not isinstance(value, bool):
            raise ConfigError(self.flag, f"is a switch (True or False), got {value!r}")
        if self.choices is not None:
            if value not in self.choices:
                noun = self.noun or self.name.replace("_", " ")
                raise ConfigError(self.flag, unknown_value(noun, value, self.choices))
            return
        if self.type is float and value is not None and not _finite_number(value):
            raise ConfigError(self.flag, f"must be a finite number, got {value!r}")
        if self.type is int and isinstance(value, int) and value > MAX_INTEGER_OPTION:
            raise ConfigError(self.flag, f"must be at most {MAX_INTEGER_OPTION}, got {value}")
        if self.minimum is not None:
            numeric = int if self.type is int else int | float
            if isinstance(value, bool) or not isinstance(value, numeric) or value < self.minimum:
                noun = "an integer" if self.type is int else "a number"
                raise ConfigError(self.flag, f"must be {noun} >= {self.minimum}, got {value!r}")

    def describe(self) -> str:
        """The help line: what it is, then its values."""
        values = f" ({' | '.join(self.choices)})" if self.choices else ""
        return f"{self.help}{values}"


@dataclass(frozen=True)
class StrategyOptions:
    """A strategy's options, typed: each strategy declares a frozen dataclass of its options
    deriving from this one (``workbench.strategies.options``), built once, by validation,
    from the checked values."""

    def values(self) -> dict[str, Any]:
        """The options by name, as ``RunConfig.options`` and the JSON records hold them."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


Typed = TypeVar("Typed", bound=StrategyOptions)


@dataclass(frozen=True, init=False)
class RunConfig:
    """Every option of a training run: the run options as fields (named like the flags), the
    strategy's options in ``options`` by name and, once validated, typed in
    ``strategy_options`` (read with :meth:`options_of`).

    Examples
    --------
    >>> config = RunConfig(strategy="mirrored", devices=2, allreduce="ring")
    >>> config.devices, config.options, config.strategy_options
    (2, {'allreduce': 'ring'}, None)
    """

    strategy: str = "one-device"
    devices: int = 1
    model: str = "mlp"
    hidden: tuple[int, ...] = (512, 512)
    dataset: str = "digits"
    epochs: int | None = None
    steps: int | None = None
    batch_size: int = 32
    lr: float | None = None
    optimizer: str = "momentum"
    seed: int = 0
    dtype: str = "float32"
    precision: str = "fp32"
    recompute: str = "none"
    accumulate: int = 1
    device_type: str = "auto"
    share_gpu: bool = False
    # An address; from Python also a distributed.Client or a Dask cluster object (stored and
    # shown as its scheduler's address).
    cluster: Any = None
    scheduler_file: str | None = None
    wait_for_workers: float | None = None
    ship_data: bool = False
    tls_ca_file: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    protocol: str = "tcp"
    save: str | None = None
    tensorboard: str | None = None
    resume: str | None = None
    warmup_steps: int = 0
    lr_scaling: str = "none"
    lr_decay: str = "cosine"
    stall_timeout: float = 60.0
    checkpoint_every: int | None = None
    max_restarts: int = 3
    replacement_timeout: float = 30.0
    simulate_straggler: tuple[tuple[str, float], ...] = ()
    simulate_overflow: tuple[int, ...] = ()
    no_calibrate: bool = False
    json: bool = False
    # The strategy's options by name; after validation, every option the strategy declares.
    options: Mapping[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    # The same options typed, set by validation (``with_strategy_options``); None before.
    strategy_options: StrategyOptions | None = field(default=None, compare=False, repr=False)

    def __init__(self, **values: Any) -> None:
        options = dict(values.pop("options", None) or {})
        for run_field in dataclasses.fields(self):
            if run_field.name == "options":
                continue
            if run_field.name in values:
                value = values.pop(run_field.name)
            elif run_field.default_factory is not dataclasses.MISSING:
                value = run_field.default_factory()
            else:
                value = run_field.default
            object.__setattr__(self, run_field.name, value)
        options.update(values)  # the rest are strategy options, checked by validate_config
        object.__setattr__(self, "options", options)

    def options_of(self, kind: type[Typed]) -> Typed:
        """The strategy's options as ``kind`` (its options' class, or a family's base class
        of it), so that a type checker sees their names and types.

        Examples
        --------
        >>> from workbench.strategies import validate_config
        >>> from workbench.strategies.options import PipelineOptions
        >>> validate_config(RunConfig(strategy="pipeline", devices=2)).options_of(
        ...     PipelineOptions
        ... ).stages
        2
        """
        held = self.strategy_options
        if isinstance(held, kind):
            return held
        if held is None:
            raise TypeError(
                f"the {self.strategy} run's options are not typed yet: "
                "workbench.strategies.validate_config returns the config with them"
            )
        raise TypeError(
            f"a {self.strategy} run's options are {type(held).__name__}, not {kind.__name__}"
        )

    def with_strategy_options(self, typed: StrategyOptions) -> RunConfig:
        """A copy whose strategy options are ``typed`` (by name in ``options`` too, in the
        order ``options`` has them: the order the records and displays show)."""
        values: dict[str, Any] = {name: getattr(self, name) for name in _FIELD_NAMES}
        typed_values = typed.values()
        options = {name: typed_values[name] for name in self.options if name in typed_values}
        options.update(typed_values)
        return RunConfig(**values, options=options, extra=self.extra, strategy_options=typed)

    def replace(self, **changes: Any) -> RunConfig:
        """A copy with ``changes`` (run options, strategy options, or a whole ``options``).
        The typed options stay only when neither the strategy nor its options change: new
        option values are checked and typed by validation again."""
        options = dict(changes.pop("options", self.options))
        values: dict[str, Any] = {name: getattr(self, name) for name in _FIELD_NAMES}
        for name, value in changes.items():
            if name in values:
                values[name] = value
            else:
                options[name] = value
        same = values["strategy"] == self.strategy and options == dict(self.options)
        typed = self.strategy_options if same else None
        return RunConfig(**values, options=options, extra=self.extra, strategy_options=typed)

    def to_dict(self, flat: bool = True) -> dict[str, Any]:
        """JSON-ready form (as stored in checkpoints and run records): the run options and,
        with ``flat``, the strategy's options beside them."""
        data = {name: getattr(self, name) for name in _FIELD_NAMES}
        data["cluster"] = cluster_address(self.cluster)
        data["hidden"] = list(self.hidden)
        data["simulate_straggler"] = [list(entry) for entry in self.simulate_straggler]
        data["simulate_overflow"] = list(self.simulate_overflow)
        if self.tensorboard is not None:  # the Python API may pass a Path
            data["tensorboard"] = os.fspath(self.tensorboard)
        if flat:
            data.update(self.options)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunConfig:
        """The inverse of :meth:`to_dict`."""
        stragglers = tuple(tuple(entry) for entry in data.get("simulate_straggler", ()))
        overflows = tuple(data.get("simulate_overflow", ()))
        return cls(
            **{
                **data,
                "hidden": tuple(data["hidden"]),
                "simulate_straggler": stragglers,
                "simulate_overflow": overflows,
            }
        )


_FIELD_NAMES = tuple(
    f.name
    for f in dataclasses.fields(RunConfig)
    if f.name not in ("options", "extra", "strategy_options")
)


def cluster_address(cluster: Any) -> str | None:
    """``--cluster`` as text: an address as given; a client's or a cluster object's
    scheduler address.

    Examples
    --------
    >>> cluster_address("tcp://10.0.0.5:8786"), cluster_address(None)
    ('tcp://10.0.0.5:8786', None)
    """
    if cluster is None or isinstance(cluster, str):
        return cluster
    scheduler = getattr(cluster, "scheduler", None)
    address = getattr(cluster, "scheduler_address", None) or getattr(scheduler, "address", None)
    return str(address) if address is not None else repr(cluster)


def _default(name: str) -> Any:
    return RunConfig.__dataclass_fields__[name].default


def parse_hidden(text: str) -> tuple[int, ...]:
    """``"512,512"`` -> ``(512, 512)``."""
    try:
        return tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ValueError(
            f"expected comma-separated positive integers like 512,512, got {text!r}"
        ) from None


def parse_straggler(text: str) -> tuple[str, float]:
    """``"task:1=3"`` -> ``("task:1", 3.0)``: a device and how many times slower it computes.

    Examples
    --------
    >>> parse_straggler("task:1=2.5")
    ('task:1', 2.5)
    """
    device, equals, factor = text.rpartition("=")
    try:
        value = float(factor)
    except ValueError:
        value = None
    if not equals or not device or value is None:
        raise ValueError(f"expected DEVICE=FACTOR like task:1=3, got {text!r}")
    return device.strip(), value


def parse_overflow_step(text: str) -> int:
    """``"3"`` -> ``3``: a global step at which ``--simulate-overflow`` makes replica 0's
    gradient infinite.

    Examples
    --------
    >>> parse_overflow_step("3")
    3
    """
    try:
        step = int(text)
    except ValueError:
        step = -1
    if step < 0:
        raise ValueError(f"expected a step number >= 0 like 3, got {text!r}")
    return step


def _run_option(name: str, kind: type, help: str, **rules: Any) -> Option:
    return Option(name, kind, _default(name), help, **rules)


# The run options, in the order ``--help`` lists them (``--strategy`` is added by the
# strategies layer, which knows the names). Defaults are RunConfig's.
RUN_OPTIONS: tuple[Option, ...] = (
    _run_option("devices", int, "number of devices (one per Dask worker)", minimum=1),
    _run_option("model", str, "model preset", choices=MODEL_NAMES),
    _run_option("hidden", tuple, "MLP hidden widths, e.g. 512,512", parse=parse_hidden),
    _run_option("dataset", str, f"data set ({' | '.join(DATASET_FORMS)})"),
    _run_option(
        "epochs",
        int,
        f"passes over the training set (default: {DEFAULT_EPOCHS})",
        minimum=1,
        optional=True,
    ),
    _run_option("steps", int, "global steps (instead of --epochs)", minimum=1, optional=True),
    _run_option("batch_size", int, "global batch size", minimum=1),
    _run_option("lr", float, "learning rate (default: the optimizer's)"),
    _run_option("optimizer", str, "optimizer", choices=OPTIMIZER_NAMES),
    _run_option("seed", int, "seed for initialisation, data order, dropout", minimum=0),
    _run_option("dtype", str, "floating-point type", choices=DTYPE_NAMES),
    _run_option(
        "precision",
        str,
        "fp32, or 16-bit compute with float32 master weights and dynamic loss scaling",
        choices=PRECISION_NAMES,
    ),
    _run_option(
        "recompute",
        str,
        "activations recomputed in backward instead of kept: none, full (every layer) or "
        "layer names like dense_0,dense_1",
    ),
    _run_option(
        "accumulate",
        int,
        "micro-steps per step: gradients of K slices of the batch summed, one exchange and "
        "one update",
        minimum=1,
    ),
    _run_option("device_type", str, "device type", choices=DEVICE_TYPE_NAMES),
    _run_option(
        "share_gpu",
        bool,
        "let several devices compute on one GPU (a one-GPU machine runs every strategy but "
        "--allreduce nccl; collectives staged through host memory)",
    ),
    _run_option("cluster", str, "address of an existing Dask scheduler to run on"),
    _run_option(
        "scheduler_file",
        str,
        "a Dask scheduler file (dask scheduler --scheduler-file PATH) naming the cluster to run on",
    ),
    _run_option(
        "wait_for_workers",
        float,
        "seconds to wait for the run's devices to join the cluster it runs on",
        minimum=0,
        optional=True,
    ),
    _run_option(
        "ship_data",
        bool,
        "the client reads the data set and sends it to each host once (for workers that "
        "cannot read its path); arrays given to fit() are always sent",
    ),
    _run_option(
        "tls_ca_file",
        str,
        "a tls:// cluster's certificate authority (default: Dask's distributed.comm.tls config)",
    ),
    _run_option("tls_cert", str, "this client's certificate for a tls:// cluster"),
    _run_option("tls_key", str, "this client's private key for a tls:// cluster"),
    _run_option(
        "protocol",
        str,
        "comms of the cluster the workbench starts (ucx: device-to-device on GPUs)",
        choices=PROTOCOL_NAMES,
    ),
    _run_option("save", str, "directory to write a checkpoint to"),
    _run_option(
        "tensorboard", str, "directory to write TensorBoard event files to (a folder per run)"
    ),
    _run_option("resume", str, "checkpoint directory to continue from"),
    _run_option("warmup_steps", int, "linear learning-rate warm-up steps", minimum=0),
    _run_option(
        "lr_scaling",
        str,
        "learning-rate scaling (linear: x batch/256)",
        choices=SCALING_RULES,
        noun="scaling rule",
    ),
    _run_option(
        "lr_decay", str, "learning-rate decay after warm-up", choices=DECAY_RULES, noun="decay rule"
    ),
    _run_option(
        "stall_timeout",
        float,
        "seconds a device may wait on a peer before the step fails",
        minimum=0.1,
    ),
    _run_option(
        "checkpoint_every",
        int,
        "steps between periodic checkpoints (default: about a minute of training on a "
        "cluster, none for one-device)",
        minimum=1,
        optional=True,
    ),
    _run_option(
        "max_restarts",
        int,
        "restarts from the last checkpoint after a device fails, before the run fails",
        minimum=0,
    ),
    _run_option(
        "replacement_timeout",
        float,
        "seconds to wait for a replacement worker after a device fails",
        minimum=0,
    ),
    _run_option(
        "simulate_straggler",
        tuple,
        "slow one device's compute, DEVICE=FACTOR like task:1=3 (repeatable)",
        parse=parse_straggler,
        repeatable=True,
    ),
    _run_option(
        "simulate_overflow",
        tuple,
        "make replica 0's gradient infinite at STEP, to watch the loss scaler skip it "
        "(--compression fp16 or bf16; repeatable)",
        parse=parse_overflow_step,
        repeatable=True,
    ),
    _run_option(
        "no_calibrate",
        bool,
        "do not time the devices at run start: placement uses a cached calibration of the "
        "same cluster if there is one, else fixed rates, and without one no step is predicted",
    ),
)


def check_run_options(config: RunConfig) -> None:
    """Check the run options (not the strategy's); raise :class:`ConfigError`."""
    for option in RUN_OPTIONS:
        option.check(getattr(config, option.name))
    if not config.hidden or any(
        isinstance(h, bool) or not isinstance(h, int) or h < 1 for h in config.hidden
    ):
        raise ConfigError(
            "--hidden", f"needs positive layer widths like 512,512, got {config.hidden}"
        )
    try:
        kind, argument = parse_dataset_spec(config.dataset)
    except DatasetError as error:
        kind = str(config.dataset).strip().partition(":")[0]
        kinds = tuple(dict.fromkeys(form.partition(":")[0] for form in DATASET_FORMS))
        if kind in kinds:  # a known kind with a bad argument
            raise ConfigError("--dataset", f"{error} (forms: {', '.join(DATASET_FORMS)})") from None
        # An unknown kind: the error lists the forms already.
        raise ConfigError("--dataset", f"{error}{did_you_mean(kind, kinds)}") from None
    if kind in ("mnist", "fashion-mnist", "cifar10") and not Path(argument).expanduser().is_dir():
        raise ConfigError("--dataset", f"{kind} directory {argument} does not exist")
    # Existence only: what is there (a FIFO, a directory) the loader refuses by name.
    if kind == "npz" and not Path(argument).expanduser().exists():
        raise ConfigError("--dataset", f"npz file {argument} does not exist")
    joins = config.cluster is not None or config.scheduler_file is not None
    if isinstance(config.cluster, str):
        check_cluster_address(config.cluster)
    if config.scheduler_file is not None:
        check_scheduler_file(config.scheduler_file)
    if config.cluster is not None and config.scheduler_file is not None:
        raise ConfigError(
            "--scheduler-file",
            f"names the cluster to run on, as --cluster {cluster_address(config.cluster)} "
            "does: give one of them",
        )
    if joins and config.protocol != "tcp":
        where = cluster_address(config.cluster) or config.scheduler_file
        raise ConfigError(
            "--protocol",
            f"chooses the comms of a cluster the workbench starts; the cluster at "
            f"{where} already uses its own (its address says which)",
        )
    check_tls_files(config, joins)
    if config.share_gpu and config.device_type == "cpu":
        raise ConfigError(
            "--share-gpu", "puts several devices on one GPU; with --device-type cpu there is none"
        )
    if config.wait_for_workers is not None and not joins:
        raise ConfigError(
            "--wait-for-workers",
            "waits for the workers of a cluster the run joins; the local cluster the "
            "workbench starts has its workers at once (add --cluster or --scheduler-file)",
        )
    straggler_pairs(config.simulate_straggler)
    overflow_steps(config.simulate_overflow)
    if config.tensorboard is not None:
        check_output_directory("--tensorboard", config.tensorboard)
    if config.epochs is not None and config.steps is not None:
        raise ConfigError("--epochs", "give either --epochs or --steps, not both")
    if config.lr is not None and (not _finite_number(config.lr) or not config.lr > 0):
        raise ConfigError("--lr", f"must be a finite number > 0, got {config.lr!r}")


def check_cluster_address(address: str) -> None:
    """``--cluster``: ``HOST:PORT`` or ``SCHEME://HOST:PORT`` with a scheme a scheduler
    listens on across processes (``inproc://`` is one process's, ``file://`` none).

    Examples
    --------
    >>> check_cluster_address("tls://10.0.0.5:8786")
    >>> try:
    ...     check_cluster_address("inproc://10.0.0.5/1/1")
    ... except ConfigError as error:
    ...     print(str(error).split(";")[0])
    --cluster: inproc://10.0.0.5/1/1 uses scheme inproc
    """
    scheme, separator, rest = address.partition("://")
    if not separator:
        scheme, rest = "tcp", address
    if scheme not in CLUSTER_SCHEMES:
        raise ConfigError(
            "--cluster",
            f"{address} uses scheme {scheme}; a scheduler address is HOST:PORT or "
            f"SCHEME://HOST:PORT with SCHEME one of: {', '.join(CLUSTER_SCHEMES)}",
        )
    host, colon, port = rest.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(
            "--cluster",
            f"{address} is not HOST:PORT with a port in 1-65535 (e.g. tcp://10.0.0.5:8786)",
        )


def check_scheduler_file(path: Any) -> None:
    """``--scheduler-file``: a small regular file once it exists (it may appear later, with
    ``--wait-for-workers``); a FIFO or a device is refused before anything opens it."""
    if not isinstance(path, str | os.PathLike) or not os.fspath(path):
        raise ConfigError("--scheduler-file", f"expected a file path, got {path!r}")
    target = Path(path).expanduser()
    try:
        status = target.stat()
    except FileNotFoundError:
        return
    except OSError as error:
        raise ConfigError("--scheduler-file", f"cannot read {target}: {error.strerror}") from None
    if not stat.S_ISREG(status.st_mode):
        raise ConfigError("--scheduler-file", f"{target} is not a regular file")
    if status.st_size > 2**20:
        raise ConfigError(
            "--scheduler-file",
            f"{target} has {status.st_size} bytes; a scheduler file is a small JSON document",
        )


def check_tls_files(config: RunConfig, joins: bool) -> None:
    """``--tls-ca-file``, ``--tls-cert`` and ``--tls-key``: for a cluster the run joins (one
    the workbench starts makes its own credentials), each an existing file, the key with its
    certificate."""
    given = {
        "--tls-ca-file": config.tls_ca_file,
        "--tls-cert": config.tls_cert,
        "--tls-key": config.tls_key,
    }
    for flag, path in given.items():
        if path is None:
            continue
        if not joins:
            raise ConfigError(
                flag,
                "is a credential for a tls:// cluster the run joins (add --cluster or "
                "--scheduler-file); a cluster the workbench starts makes its own",
            )
        if not Path(path).expanduser().is_file():
            raise ConfigError(flag, f"{path} is not a file")
    if (config.tls_cert is None) != (config.tls_key is None):
        missing = "--tls-key" if config.tls_key is None else "--tls-cert"
        raise ConfigError(missing, "the certificate and its private key go together: give both")


def check_output_directory(flag: str, path: Any) -> None:
    """A directory that outputs go under (``--tensorboard``): one that exists, or one that can
    be created (its nearest existing parent a writable directory); checked before any cluster
    starts, so a typo does not cost a run.

    Examples
    --------
    >>> try:
    ...     check_output_directory("--tensorboard", "/dev/null/runs")
    ... except ConfigError as error:
    ...     print(error)
    --tensorboard: cannot create /dev/null/runs: /dev/null is not a directory
    """
    if not isinstance(path, str | os.PathLike) or not os.fspath(path):
        raise ConfigError(flag, f"expected a directory path, got {path!r}")
    target = Path(path).expanduser()
    if target.exists():
        if not target.is_dir():
            raise ConfigError(flag, f"{target} exists and is not a directory")
        if not os.access(target, os.W_OK | os.X_OK):
            raise ConfigError(flag, f"{target} is not writable")
        return
    parent = target.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise ConfigError(flag, f"cannot create {target}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(flag, f"cannot create {target}: {parent} is not writable")


def straggler_pairs(stragglers: Any) -> tuple[tuple[str, float], ...]:
    """``--simulate-straggler`` as (device, factor >= 1) pairs (``"task:1=3"`` text accepted,
    as the Python API may pass it); which devices exist is the strategy's to say
    (``workbench.strategies.validate_config``)."""
    if not isinstance(stragglers, tuple | list):
        raise ConfigError(
            "--simulate-straggler", f"expected DEVICE=FACTOR pairs, got {stragglers!r}"
        )
    pairs = []
    for entry in stragglers:
        if isinstance(entry, str):
            try:
                entry = parse_straggler(entry)
            except ValueError as error:
                raise ConfigError("--simulate-straggler", str(error)) from None
        if not isinstance(entry, tuple | list) or len(entry) != 2:
            raise ConfigError(
                "--simulate-straggler", f"expected DEVICE=FACTOR like task:1=3, got {entry!r}"
            )
        device, factor = entry
        if not _finite_number(factor) or not factor >= 1:
            raise ConfigError(
                "--simulate-straggler",
                f"{device}={factor}: the factor must be a finite number >= 1 (how many times "
                "slower)",
            )
        pairs.append((str(device), float(factor)))
    return tuple(pairs)


def overflow_steps(steps: Any) -> tuple[int, ...]:
    """``--simulate-overflow`` as step numbers >= 0 (text accepted, as the Python API may pass
    it); whether the run's compression scales its loss is the strategies' to say."""
    if not isinstance(steps, tuple | list):
        raise ConfigError("--simulate-overflow", f"expected step numbers, got {steps!r}")
    checked = []
    for step in steps:
        if isinstance(step, str):
            try:
                step = parse_overflow_step(step)
            except ValueError as error:
                raise ConfigError("--simulate-overflow", str(error)) from None
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ConfigError(
                "--simulate-overflow", f"expected a step number >= 0 like 3, got {step!r}"
            )
        checked.append(step)
    return tuple(checked)


def check_checkpoint_paths(config: RunConfig) -> None:
    if config.save is not None:
        check_output_directory("--save", config.save)
        target = Path(config.save).expanduser()
        if target.exists() and not target.is_dir():
            raise ConfigError("--save", f"{target} exists and is not a directory")
        if target.is_dir() and any(target.iterdir()) and not (target / "manifest.json").exists():
            raise ConfigError(
                "--save",
                f"{target} holds other files; choose an empty or new directory, "
                "or an earlier checkpoint to overwrite",
            )
        parent = target.parent if not target.exists() else target
        while not parent.exists():
            parent = parent.parent
        if not os.access(parent, os.W_OK):
            raise ConfigError("--save", f"{parent} is not writable")
    if config.resume is not None:
        source = Path(config.resume).expanduser()
        if not (source / "manifest.json").exists():
            raise ConfigError("--resume", f"{source} is not a checkpoint (no manifest.json)")


def total_steps(config: RunConfig, steps_per_epoch: int) -> int:
    if config.steps is not None:
        return config.steps
    steps = (config.epochs or DEFAULT_EPOCHS) * steps_per_epoch
    if steps > MAX_INTEGER_OPTION:
        raise ConfigError(
            "--epochs",
            f"{config.epochs} epochs of {steps_per_epoch} steps are {steps} steps, more than "
            f"{MAX_INTEGER_OPTION}",
        )
    return steps
