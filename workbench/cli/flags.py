"""The one flag parser behind ``dtrain run`` and ``%dtrain``.

argparse only splits and converts types; every rule about values lives in
:func:`workbench.config.validate_config`, so the command line, the magic and the Python API
reject the same inputs with the same messages.
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Sequence

from workbench.config import (
    ALLREDUCE_NAMES,
    DEVICE_TYPE_NAMES,
    DTYPE_NAMES,
    MODE_NAMES,
    REPLICATION_NAMES,
    SCHEDULE_NAMES,
    ConfigError,
    RunConfig,
    validate_config,
)
from workbench.data import DATASET_FORMS
from workbench.models import MODEL_NAMES
from workbench.optim import DECAY_RULES, OPTIMIZER_NAMES, SCALING_RULES


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


def _hidden(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated positive integers like 512,512, got {text!r}"
        ) from None
    return sizes


def _allowed(names: Sequence[str]) -> str:
    return " | ".join(names)


def build_parser(prog: str = "dtrain run") -> argparse.ArgumentParser:
    from workbench.parallel.registry import STRATEGY_NAMES

    parser = _Parser(
        prog=prog,
        add_help=True,
        allow_abbrev=False,
        description="Train a model with a parallel strategy.",
    )
    add = parser.add_argument
    add("--strategy", default="one-device", help=_allowed(STRATEGY_NAMES))
    add("--devices", type=int, default=1, help="number of devices (one per Dask worker)")
    add("--model", default="mlp", help=_allowed(MODEL_NAMES))
    add("--hidden", type=_hidden, default=(512, 512), help="MLP hidden widths, e.g. 512,512")
    add("--dataset", default="digits", help=_allowed(DATASET_FORMS))
    add("--epochs", type=int, default=None, help="passes over the training set (default 10)")
    add("--steps", type=int, default=None, help="global steps (instead of --epochs)")
    add("--batch-size", type=int, default=32, help="global batch size")
    add("--lr", type=float, default=None, help="learning rate (default: the optimizer's)")
    add("--optimizer", default="momentum", help=_allowed(OPTIMIZER_NAMES))
    add("--seed", type=int, default=0, help="seed for initialisation, data order, dropout")
    add("--dtype", default="float32", help=_allowed(DTYPE_NAMES))
    add("--allreduce", default="ring", help=_allowed(ALLREDUCE_NAMES))
    add("--ps", type=int, default=1, help="parameter-server shards")
    add("--mode", default="sync", help=_allowed(MODE_NAMES))
    add("--staleness", type=int, default=None, help="bound on update staleness (async mode)")
    add("--replication", default="between-graph", help=_allowed(REPLICATION_NAMES))
    add("--stages", type=int, default=2, help="pipeline stages")
    add("--microbatches", type=int, default=4, help="micro-batches per global batch")
    add("--schedule", default="gpipe", help=_allowed(SCHEDULE_NAMES))
    add("--device-type", default="auto", help=_allowed(DEVICE_TYPE_NAMES))
    add("--cluster", default=None, help="address of an existing Dask scheduler")
    add("--save", default=None, help="directory to write a checkpoint to")
    add("--resume", default=None, help="checkpoint directory to continue from")
    add("--warmup-steps", type=int, default=0, help="linear learning-rate warm-up steps")
    add("--lr-scaling", default="none", help=_allowed(SCALING_RULES) + " (linear: x batch/256)")
    add("--lr-decay", default="cosine", help=_allowed(DECAY_RULES) + " (after warm-up)")
    add(
        "--bucket-mb",
        type=float,
        default=25.0,
        help="gradient fusion bucket size in MiB (all-reduce strategies)",
    )
    add(
        "--compression",
        default="none",
        help="none | float16 (gradients travel as float16; mirrored strategies)",
    )
    add("--hosts", type=int, default=2, help="simulated hosts (multi-worker-mirrored, one machine)")
    add(
        "--stall-timeout",
        type=float,
        default=60.0,
        help="seconds a device may wait on a peer before the step fails",
    )
    add("--json", action="store_true", help="print one JSON summary on stdout at the end")
    return parser


def parse_run_flags(argv: Sequence[str], prog: str = "dtrain run") -> RunConfig:
    """Parse and validate flags into a :class:`RunConfig`.

    Examples
    --------
    >>> parse_run_flags(["--steps", "5", "--hidden", "32,16"]).hidden
    (32, 16)
    """
    namespace = build_parser(prog).parse_args(list(argv))
    values = vars(namespace)
    return validate_config(RunConfig(**values))
