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
from collections.abc import Sequence
from dataclasses import dataclass

from workbench.config import RUN_OPTIONS, ConfigError, Option, RunConfig, check_run_options
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


def _add(group, option: Option, default, extra_help: str = "") -> None:
    shown = "" if option.default is None else f" [default: {option.default}]"
    if isinstance(option.default, tuple):
        shown = f" [default: {','.join(map(str, option.default))}]" if option.default else ""
    if option.type is bool:  # a switch: present or not
        group.add_argument(
            option.flag,
            dest=option.name,
            action="store_true",
            default=default,
            help=f"{option.describe()}{extra_help}",
        )
        return
    if option.repeatable:  # collected into a list here, a tuple in the RunConfig
        group.add_argument(
            option.flag,
            dest=option.name,
            action="append",
            type=_converter(option),
            default=argparse.SUPPRESS,
            help=f"{option.describe()}{extra_help}",
        )
        return
    group.add_argument(
        option.flag,
        dest=option.name,
        type=_converter(option),
        default=default,
        help=f"{option.describe()}{shown}{extra_help}",
    )


def build_parser(prog: str = "dtrain run") -> argparse.ArgumentParser:
    parser = _Parser(
        prog=prog,
        add_help=True,
        allow_abbrev=False,
        description="Train a model with a parallel strategy.",
    )
    run = parser.add_argument_group("run options")
    strategies = " | ".join(STRATEGIES.names())
    run.add_argument("--strategy", default="one-device", help=f"{strategies} [default: one-device]")
    for option in RUN_OPTIONS:
        _add(run, option, option.default)
    run.add_argument("--json", action="store_true", help="print one JSON summary on stdout")
    group = parser.add_argument_group("strategy options (each for the strategies named)")
    for option in STRATEGIES.options().values():
        # Absent unless typed: a strategy gets its own defaults, and an option typed for a
        # strategy that does not take it is refused by name.
        _add(group, option, argparse.SUPPRESS, f"; {', '.join(STRATEGIES.takers(option.name))}")
    return parser


def parse_run_flags(argv: Sequence[str], prog: str = "dtrain run") -> RunConfig:
    """Parse and validate flags into a :class:`RunConfig`.

    Examples
    --------
    >>> parse_run_flags(["--steps", "5", "--hidden", "32,16"]).hidden
    (32, 16)
    >>> parse_run_flags(["--strategy", "mirrored", "--devices", "2"]).allreduce
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


def parse_plan_flags(argv: Sequence[str]) -> tuple[RunConfig, PlanRequest]:
    """The run's flags plus ``--what-if`` and ``--what-if-cluster SPEC`` (which implies it).

    Examples
    --------
    >>> config, request = parse_plan_flags(["--devices", "2", "--what-if-cluster", "dgx-h100"])
    >>> config.devices, request.what_if, request.what_if_cluster
    (2, True, 'dgx-h100')
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
    values = vars(parser.parse_args(list(argv)))
    cluster = values.pop("what_if_cluster")
    what_if = values.pop("what_if") or cluster is not None
    # A what-if plan tries every strategy: only the run options must hold.
    return _config(values, strategy_rules=not what_if), PlanRequest(what_if, cluster)
