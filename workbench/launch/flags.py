"""The one flag parser behind ``dtrain run``, ``dtrain plan`` and ``%dtrain``, derived from the
option rows: the run options (:data:`workbench.config.RUN_OPTIONS`) and every registered
strategy's options, each flag with its default, values and the strategies that take it.

argparse only splits and converts types; every rule about values lives in
:func:`workbench.strategies.validate_config`, so the command line, the magic, the notebook
form and the Python API reject the same inputs with the same messages.
"""

from __future__ import annotations

import argparse
import difflib
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

from workbench.config import RUN_OPTIONS, ConfigError, Option, RunConfig, check_run_options
from workbench.launch.memory_size import parse_memory_size
from workbench.strategies import STRATEGIES, validate_config


class FlagError(ConfigError):
    """A flag that could not be parsed (unknown flag, missing or mistyped value)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would print and exit; we raise instead
        if message.startswith("unrecognized arguments:"):
            unknown = message.split(":", 1)[1].split()
            flag = next((word for word in unknown if word.startswith("-")), unknown[0])
            known = [option for action in self._actions for option in action.option_strings]
            close = difflib.get_close_matches(flag, known, n=1)
            hint = f"; did you mean {close[0]}?" if close else f"; see {self.prog} --help"
            raise FlagError(flag, f"unknown flag{hint}")
        if message.startswith("argument "):
            field, _, detail = message[len("argument ") :].partition(": ")
            raise FlagError(field.split("/")[0], detail)
        raise FlagError("flags", message)


class _HelpFormatter(argparse.HelpFormatter):
    """Wraps help at spaces only: strategy names and values (``multi-worker-mirrored``,
    ``--bucket-mb``) stay whole."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)


def _converter(option: Option):
    """The text -> value function argparse calls (its errors name the flag)."""
    if option.parse is None:
        return option.type  # argparse says "invalid int value: 'x'" itself
    convert = option.parse

    def parse(text: str):
        try:
            return convert(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return parse


# ``dtrain run --help``: what most runs set first, then the advanced groups; a run option not
# named here is listed under "more run options".
BASIC = (
    "devices",
    "dataset",
    "model",
    "hidden",
    "epochs",
    "steps",
    "batch_size",
    "lr",
    "optimizer",
)
ADVANCED_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("training", ("seed", "dtype", "warmup_steps", "lr_scaling", "lr_decay")),
    (
        "cluster and devices",
        (
            "device_type",
            "share_gpu",
            "protocol",
            "cluster",
            "scheduler_file",
            "wait_for_workers",
            "ship_data",
            "tls_ca_file",
            "tls_cert",
            "tls_key",
            "no_calibrate",
        ),
    ),
    ("checkpoints and outputs", ("save", "resume", "checkpoint_every", "tensorboard")),
    (
        "faults and fault drills",
        (
            "stall_timeout",
            "max_restarts",
            "replacement_timeout",
            "simulate_straggler",
            "simulate_overflow",
        ),
    ),
)
# The usage line names the basic flags; the rest are "[flag ...]" (see the groups).
USAGE_LINES = (
    "[--strategy NAME] [--devices N] [--dataset SPEC] [--model NAME]",
    "[--epochs N | --steps N] [--batch-size N] [--lr X] [--json] [flag ...]",
)
# What a flag's value is called in the help, where its type does not say (choices: NAME).
_METAVARS = {
    "dataset": "SPEC",
    "hidden": "WIDTHS",
    "cluster": "ADDRESS",
    "scheduler_file": "FILE",
    "tls_ca_file": "FILE",
    "tls_cert": "FILE",
    "tls_key": "FILE",
    "save": "DIR",
    "resume": "DIR",
    "tensorboard": "DIR",
    "simulate_straggler": "DEVICE=FACTOR",
    "simulate_overflow": "STEP",
    "compression": "FORM",
}


def _metavar(option: Option) -> str:
    if option.name in _METAVARS:
        return _METAVARS[option.name]
    if option.choices:
        return "NAME"
    return {int: "N", float: "X"}.get(option.type, option.name.upper())


def _help(option: Option, takers: tuple[str, ...]) -> str:
    """The help line: what it is, then in one parenthesis its values, the strategies that
    take it and its default, the one way the help shows a default (``default: X``)."""
    notes = [" | ".join(option.choices)] if option.choices else []
    if takers:
        notes.append(f"for {', '.join(takers)}")
    default = option.default
    if isinstance(default, tuple):
        default = ",".join(map(str, default)) or None
    if not (option.type is bool or option.repeatable or default is None):
        notes.append(f"default: {default}")
    return f"{option.help} ({'; '.join(notes)})" if notes else option.help


def _add(group, option: Option, default, takers: tuple[str, ...] = ()) -> None:
    text = _help(option, takers)
    if option.type is bool:  # a switch: present or not
        group.add_argument(
            option.flag, dest=option.name, action="store_true", default=default, help=text
        )
        return
    if option.repeatable:  # collected into a list here, a tuple in the RunConfig
        group.add_argument(
            option.flag,
            dest=option.name,
            action="append",
            type=_converter(option),
            default=argparse.SUPPRESS,
            metavar=_metavar(option),
            help=text,
        )
        return
    group.add_argument(
        option.flag,
        dest=option.name,
        type=_converter(option),
        default=default,
        metavar=_metavar(option),
        help=text,
    )


def build_parser(prog: str = "dtrain run") -> argparse.ArgumentParser:
    """The run's flags: a basic group first (strategy, devices, data, model, length, batch,
    learning rate, --json), then the strategies' options and the advanced run options."""
    parser = _Parser(
        prog=prog,
        formatter_class=_HelpFormatter,
        usage=f"%(prog)s {USAGE_LINES[0]}\n{' ' * (len('usage: ') + len(prog) + 1)}"
        f"{USAGE_LINES[1]}",
        add_help=False,
        allow_abbrev=False,
        description="Train a model with a parallel strategy. The basic flags come first; the "
        "groups after them are for particular strategies and advanced uses.",
    )
    options = {option.name: option for option in RUN_OPTIONS}
    basic = parser.add_argument_group("basic")
    basic.add_argument("-h", "--help", action="help", help="show this help and exit")
    strategies = " | ".join(STRATEGIES.names())
    basic.add_argument(
        "--strategy",
        default="one-device",
        metavar="NAME",
        help=f"parallel strategy ({strategies}; default: one-device)",
    )
    for name in BASIC:
        option = options.pop(name)
        _add(basic, option, option.default)
    basic.add_argument("--json", action="store_true", help="print one JSON summary on stdout")
    group = parser.add_argument_group("strategy options (each for the strategies named)")
    for option in STRATEGIES.options().values():
        # Absent unless typed: a strategy gets its own defaults, and an option typed for a
        # strategy that does not take it is refused by name.
        _add(group, option, argparse.SUPPRESS, STRATEGIES.takers(option.name))
    for title, names in ADVANCED_GROUPS:
        advanced = parser.add_argument_group(title)
        for name in names:
            if name in options:
                option = options.pop(name)
                _add(advanced, option, option.default)
    if options:  # a run option no group names yet
        more = parser.add_argument_group("more run options")
        for option in options.values():
            _add(more, option, option.default)
    return parser


def parse_run_flags(argv: Sequence[str], prog: str = "dtrain run") -> RunConfig:
    """Parse and validate flags into a :class:`RunConfig`.

    Examples
    --------
    >>> parse_run_flags(["--steps", "5", "--hidden", "32,16"]).hidden
    (32, 16)
    >>> parse_run_flags(["--strategy", "mirrored", "--devices", "2"]).options["allreduce"]
    'auto'
    """
    return _config(vars(build_parser(prog).parse_args(list(argv))))


def _config(values: dict, strategy_rules: bool = True) -> RunConfig:
    for name, value in values.items():
        if isinstance(value, list):  # a repeatable flag
            values[name] = tuple(value)
    if not strategy_rules:
        config = RunConfig(**values)
        check_run_options(config)
        return config
    return validate_config(RunConfig(**values))


def parse_calibrate_flags(argv: Sequence[str]) -> RunConfig:
    """``dtrain calibrate``'s flags: the run's, of which only the cluster (``--devices``,
    ``--cluster``, ``--device-type``) and the model and batch matter, so no strategy's
    rules apply.

    Examples
    --------
    >>> parse_calibrate_flags(["--devices", "4"]).devices
    4
    """
    return _config(vars(build_parser("dtrain calibrate").parse_args(list(argv))), False)


@dataclass(frozen=True)
class PlanRequest:
    """What ``dtrain plan`` is asked beyond the run's flags."""

    what_if: bool = False
    what_if_cluster: str | None = None
    memory_per_device: int | None = None  # bytes: rows needing more are marked
    what_if_top: int | None = None  # show the best K ranked rows (None: every row)


def parse_plan_flags(argv: Sequence[str]) -> tuple[RunConfig, PlanRequest]:
    """The run's flags plus ``--what-if`` and ``--what-if-cluster SPEC`` (which implies it),
    and ``--memory-per-device SIZE`` (which implies ``--what-if``).

    Examples
    --------
    >>> config, request = parse_plan_flags(["--devices", "2", "--what-if-cluster", "dgx-h100"])
    >>> config.devices, request.what_if, request.what_if_cluster
    (2, True, 'dgx-h100')
    >>> parse_plan_flags(["--memory-per-device", "1.5GB"])[1].memory_per_device
    1500000000
    >>> parse_plan_flags(["--what-if-top", "5"])[1].what_if_top
    5
    """
    parser = build_parser("dtrain plan")
    plan = parser.add_argument_group("plan options")
    plan.add_argument(
        "--what-if",
        action="store_true",
        help="predict every strategy and its main options for this model, batch and cluster "
        "(the local cluster of --devices, calibrated), ranked",
    )
    plan.add_argument(
        "--what-if-cluster",
        metavar="SPEC",
        help="predict on a described cluster instead: a preset (dgx-h100, dgx-h200, dgx-a100, "
        "cloud-8xv100-25g, laptop) and/or fields like "
        "hosts=16,gpus-per-host=8,intra=nvlink:300GB/s,inter=200Gb/s",
    )
    plan.add_argument(
        "--memory-per-device",
        metavar="SIZE",
        type=_memory_size,
        help="with --what-if: each device's memory (16GiB, 512MiB, 1.5GB, or bytes); rows "
        "whose predicted peak needs more are marked and ranked last (default: a described "
        "cluster's device memory, none on the local cluster)",
    )
    plan.add_argument(
        "--what-if-top",
        metavar="K",
        type=_top_count,
        help="with --what-if: show only the K best ranked configurations (implies --what-if)",
    )
    values = vars(parser.parse_args(list(argv)))
    cluster = values.pop("what_if_cluster")
    memory = values.pop("memory_per_device")
    top = values.pop("what_if_top")
    what_if = values.pop("what_if") or any(v is not None for v in (cluster, memory, top))
    # A what-if plan tries every strategy: only the run options must hold.
    config = _config(values, strategy_rules=not what_if)
    return config, PlanRequest(what_if, cluster, memory, top)


def _top_count(text: str) -> int:
    """argparse's converter for ``--what-if-top`` (its error names the flag)."""
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r}: how many ranked configurations to show, a whole number >= 1"
        )
    return count


def _memory_size(text: str) -> int:
    """argparse's converter for ``--memory-per-device`` (its error names the flag)."""
    try:
        return parse_memory_size(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
