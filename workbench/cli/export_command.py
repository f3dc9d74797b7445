"""``dtrain export --tensorboard DIR RUN_ID``: a stored run's events as TensorBoard event files,
in ``DIR/RUN_ID`` (so several exported runs compare side by side: ``tensorboard --logdir DIR``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from workbench.config import ConfigError, check_output_directory
from workbench.events.tensorboard import write_run
from workbench.runtime.devices import device_tag
from workbench.store import RUN_ID_RULE, RunStore, StoredRun, StoreError, valid_run_id

PROG = "dtrain export"
RUNS_LISTED = 10  # the newest runs an unknown id's message names


class _ExportParser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would print and exit; the command reports it
        raise ConfigError("flags", f"{message}; see {PROG} --help")


def build_parser() -> argparse.ArgumentParser:
    parser = _ExportParser(
        prog=PROG,
        allow_abbrev=False,
        description="Write a stored run's events in a format other tools read.",
    )
    parser.add_argument(
        "--tensorboard",
        metavar="DIR",
        required=True,
        help="write TensorBoard event files into DIR/RUN_ID (view: tensorboard --logdir DIR)",
    )
    parser.add_argument(
        "run_id", metavar="RUN_ID", help="a run in the run store (dtrain run prints its id)"
    )
    return parser


def open_run(store: RunStore, run_id: str) -> StoredRun:
    """The stored run ``run_id``, or a :class:`ConfigError` saying where runs are listed."""
    if not valid_run_id(run_id):
        # Checked before the id touches a path: "../x" would name a run outside the store
        # and an export folder outside DIR.
        raise ConfigError("RUN_ID", f"{run_id[:80]!r} is not a run id ({RUN_ID_RULE})")
    try:
        return store.open(run_id)
    except KeyError:
        newest = [run.run_id for run in store.runs()][-RUNS_LISTED:]
        known = ", ".join(newest) if newest else "none yet"
        raise ConfigError(
            "RUN_ID",
            f"no run {run_id!r} in the run store at {store.root} (set by $DTRAIN_RUN_STORE); "
            f"its newest runs: {known}. dtrain run prints each run's id as it starts, and "
            "the JupyterLab sidebar lists them",
        ) from None


def export_tensorboard(run: StoredRun, root: str) -> tuple[Path, list[str]]:
    """Write ``run`` into ``root/<run id>``; returns that folder and the scalar tags."""
    check_output_directory("--tensorboard", root)
    target = Path(root).expanduser() / run.run_id
    if target.exists():
        raise ConfigError(
            "--tensorboard",
            f"{target} already holds this run's event files (a live --tensorboard run or an "
            "earlier export); remove it or choose another directory",
        )
    tags = write_run(
        target,
        run.events(),
        run.config(),
        run.summary(),
        device_label=device_tag,
        time_origin=run.status().get("started"),
    )
    return target, tags


def export_command(argv: Sequence[str]) -> int:
    """Run ``dtrain export``; 2 on a user error (a flag, an unknown run, an unusable DIR)."""
    try:
        arguments = build_parser().parse_args(list(argv))
        run = open_run(RunStore(), arguments.run_id)
        target, tags = export_tensorboard(run, arguments.tensorboard)
    except (ConfigError, StoreError) as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2
    print(f"wrote {len(tags)} scalar tags to {target}")
    print(f"view: tensorboard --logdir {Path(arguments.tensorboard).expanduser()}")
    return 0
