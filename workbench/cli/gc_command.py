"""``dtrain gc``: remove what this user's runs left behind on this host after a crash (a
``kill -9`` of the client, a machine that lost power): shared-memory directories of runs
that are over, Dask scratch directories of clusters whose process is gone, and run-store
entries still marked running whose process died (marked ``lost`` with the reason).

Each local run also sweeps the first two as it starts; ``dtrain gc`` is for a user who wants
the space back now. Only this user's objects are touched, and only those no live process
holds (docs/security.md).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from workbench.runtime.scratch import sweep_stale_scratch_directories
from workbench.runtime.shared_memory import sweep_stale_run_directories
from workbench.store import RunStore, StoreError

PROG = "dtrain gc"


def build_parser() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(
        prog=PROG,
        description="Remove the shared memory, scratch directories and running-but-dead run "
        "records this user's crashed runs left on this host.",
    )


def collect_garbage() -> dict[str, list[str]]:
    """What was removed or marked, by kind."""
    shared = sweep_stale_run_directories()
    scratch = sweep_stale_scratch_directories()
    lost = [entry.run_id for entry in RunStore().entries() if entry.state == "lost"]
    return {"shared memory": shared, "scratch directories": scratch, "runs recorded lost": lost}


def gc_command(argv: Sequence[str]) -> int:
    parser = build_parser()
    try:
        parser.parse_args(list(argv))
        found = collect_garbage()
    except SystemExit as exit_:  # argparse's own usage error or --help
        return int(exit_.code or 0)
    except StoreError as error:
        print(f"{PROG}: error: {error}", file=sys.stderr)
        return 2
    for kind, names in found.items():
        print(f"{kind}: {len(names)}")
        for name in names:
            print(f"  {name}")
    return 0
