"""The flags' types, the flags several suites share, and settings built from parsed flags.

A suite declares its flags with :func:`add_settings_flags`, one per field of its settings
dataclass: the flag's destination is the field's name and its default the field's default, so
:func:`settings_from` builds the settings from the parsed flags without a line per field. A suite
whose flags are all fields of its settings gets both of its functions from
:func:`settings_suite`.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from benchmarks.suite import Progress, Result

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

Settings = TypeVar("Settings", bound="DataclassInstance")
AddFlags = Callable[[argparse.ArgumentParser], None]
Run = Callable[[argparse.Namespace, Progress], Result]


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def non_negative(text: str) -> int:
    return 0 if text.strip() == "0" else positive(text)


def positive_list(text: str) -> tuple[int, ...]:
    try:
        return tuple(positive(part) for part in text.split(","))
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated positive integers like 512,512, got {text!r}"
        ) from None


def mebibytes(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive size in MiB, got {text!r}")
    return value


def names_from(allowed: Iterable[str]) -> Callable[[str], tuple[str, ...]]:
    """A flag type for a comma-separated choice of names out of ``allowed``."""
    choices = tuple(allowed)

    def parse(text: str) -> tuple[str, ...]:
        names = tuple(name.strip() for name in text.split(",") if name.strip())
        if not names or any(name not in choices for name in names):
            raise argparse.ArgumentTypeError(
                f"expected names from {','.join(choices)}, got {text!r}"
            )
        return names

    return parse


@dataclass(frozen=True)
class Flag:
    """One command-line flag: its spellings (the first is the one help shows), how its value
    parses and what it means. ``action`` is argparse's (``store_true``, ``store_false``)."""

    options: tuple[str, ...]
    help: str
    type: Callable[[str], Any] | None = None
    choices: tuple[str, ...] | None = None
    action: str | None = None


SHARED = {
    "repeats": Flag(("--repeats",), "runs of each contender", positive),
    "seed": Flag(("--seed",), "random seed", int),
    "steps": Flag(("--train-steps",), "training steps per run", positive),
    "hidden": Flag(("--hidden",), "hidden layer widths, e.g. 512,512", positive_list),
    "batch_size": Flag(("--batch-size",), "global batch", positive),
    "learning_rate": Flag(("--lr",), "SGD learning rate", float),
    "devices": Flag(("--devices",), "devices (one worker process each)", positive),
}


def add_settings_flags(
    parser: argparse.ArgumentParser, defaults: object, shared: Iterable[str] = (), **own: Flag
) -> None:
    """Adds the flags in ``SHARED`` named by ``shared`` and the suite's ``own`` flags, each
    keyed by the settings field it sets and defaulting to that field of ``defaults``."""
    flags = {**{name: SHARED[name] for name in shared}, **own}
    for name, flag in flags.items():
        default = getattr(defaults, name)
        options: dict[str, Any] = {"dest": name, "default": default}
        shown = flag.help if default is None else f"{flag.help} ({_shown(default)})"
        if flag.action is not None:
            options["action"] = flag.action
            shown = flag.help
        elif flag.choices is not None:
            options["choices"] = flag.choices
        else:
            metavar = flag.options[0].lstrip("-").upper().replace("-", "_")
            options.update(type=flag.type, metavar=metavar)
        parser.add_argument(*flag.options, help=shown.replace("%", "%%"), **options)


def _shown(value: object) -> str:
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return str(value)


def settings_from(settings_type: type[Settings], args: argparse.Namespace) -> Settings:
    """``settings_type`` with every field a flag set taken from ``args``, the rest defaulted."""
    names = {field.name for field in dataclasses.fields(settings_type)}
    return settings_type(**{name: value for name, value in vars(args).items() if name in names})


def settings_suite(
    settings_type: type[Settings],
    run_suite: Callable[[Settings, Progress], Result],
    shared: Iterable[str] = (),
    **own: Flag,
) -> tuple[
    Callable[[argparse.ArgumentParser], None], Callable[[argparse.Namespace, Progress], Result]
]:
    """A suite's ``add_flags`` and ``run`` (:mod:`benchmarks.suite`) when each of its flags sets
    a field of ``settings_type``: the flags named as for :func:`add_settings_flags`, and a run
    that calls ``run_suite`` with the settings the parsed flags make."""
    names = tuple(shared)

    def add_flags(parser: argparse.ArgumentParser) -> None:
        add_settings_flags(parser, settings_type(), names, **own)

    def run(args: argparse.Namespace, progress: Progress) -> Result:
        return run_suite(settings_from(settings_type, args), progress)

    return add_flags, run
