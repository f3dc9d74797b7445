"""Runs for the UI tests, written into ``$DTRAIN_RUN_STORE`` by the real training engine.

First a short finished run (mirrored, 2 devices), then a long live one that trains until the
test stops it through the store (the sidebar's Stop). ``runs.json`` in the store names both
once the live run has started; this process exits when the live run ends.
"""

import json
import os
import sys
from pathlib import Path

from workbench.config import RunConfig
from workbench.launch.background_run import BackgroundRun
from workbench.store import RunStore


def main() -> int:
    root = Path(os.environ["DTRAIN_RUN_STORE"])
    store = RunStore(root)
    finished = BackgroundRun(
        RunConfig(strategy="mirrored", devices=2, steps=60, batch_size=64), store=store
    ).wait()
    live = BackgroundRun(
        RunConfig(strategy="mirrored", devices=2, steps=200_000, batch_size=64), store=store
    )
    manifest = {"finished": finished.run_id, "live": live.run_id, "pid": os.getpid()}
    (root / ".runs.json.tmp").write_text(json.dumps(manifest))
    os.replace(root / ".runs.json.tmp", root / "runs.json")
    print(json.dumps(manifest), flush=True)
    live.wait(timeout=600)
    return 0


if __name__ == "__main__":
    sys.exit(main())
