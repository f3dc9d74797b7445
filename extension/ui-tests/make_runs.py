"""Runs for the UI tests, written into ``$DTRAIN_RUN_STORE`` by the real training engine.

First a short finished run (mirrored, 2 devices), then two runs the sidebar must list flagged
rather than fail on (one whose loss diverged to NaN, one whose status.json was cut short),
then a long live one that trains until the test stops it through the store (the sidebar's
Stop). ``runs.json`` in the store names them once the live run has started; this process
exits when the live run ends.
"""

import json
import os
import sys
from pathlib import Path

from workbench.config import RunConfig
from workbench.events.records import ScalarEvent
from workbench.launch.background_run import BackgroundRun
from workbench.store import RunStore


def diverged_and_damaged(store: RunStore) -> tuple[str, str]:
    """A run whose loss went NaN, recorded as the store records any run, and a run whose
    status.json ends mid-way (its writer killed on a filesystem without atomic renames)."""
    config = {"strategy": "mirrored", "devices": 2, "steps": 2, "batch_size": 64}
    diverged = store.create("ui-diverged", config, steps=2)
    diverged.record(ScalarEvent("loss", 0, 2.3, 0.1))
    diverged.record(ScalarEvent("loss", 1, float("nan"), 0.2))
    diverged.finish("finished")
    damaged = store.create("ui-damaged", config, steps=2)
    damaged.finish("finished")
    status = damaged.run.path / "status.json"
    status.write_text(status.read_text()[:40])
    return diverged.run.run_id, damaged.run.run_id


def main() -> int:
    root = Path(os.environ["DTRAIN_RUN_STORE"])
    store = RunStore(root)
    finished = BackgroundRun(
        RunConfig(strategy="mirrored", devices=2, steps=60, batch_size=64), store=store
    ).wait()
    diverged, damaged = diverged_and_damaged(store)
    live = BackgroundRun(
        RunConfig(strategy="mirrored", devices=2, steps=200_000, batch_size=64), store=store
    )
    manifest = {
        "finished": finished.run_id,
        "live": live.run_id,
        "diverged": diverged,
        "damaged": damaged,
        "pid": os.getpid(),
    }
    (root / ".runs.json.tmp").write_text(json.dumps(manifest))
    os.replace(root / ".runs.json.tmp", root / "runs.json")
    print(json.dumps(manifest), flush=True)
    live.wait(timeout=600)
    return 0


if __name__ == "__main__":
    sys.exit(main())
