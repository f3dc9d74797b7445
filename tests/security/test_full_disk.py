"""A run store on a full disk: ``dtrain run`` ends with one error line (no traceback), and the
store says ``failed`` with the reason, its events file ending on a whole line."""

from __future__ import annotations

import contextlib
import importlib
import io
import json

cli_main = importlib.import_module("workbench.cli.main")


def test_a_full_disk_ends_the_run_failed_with_one_line(full_disk, monkeypatch):
    monkeypatch.setenv("DTRAIN_RUN_STORE", str(full_disk / "runs"))
    errors = io.StringIO()
    with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
        code = cli_main.main(["run", "--steps", "400", "--hidden", "16"])
    lines = [line for line in errors.getvalue().splitlines() if not line.startswith("[")]
    assert code == 2
    assert len(lines) == 1 and lines[0].startswith("dtrain run: error: "), lines
    assert "No space left on device" in lines[0]
    (run,) = [path for path in (full_disk / "runs").iterdir() if path.name != "calibrations"]
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "failed" and "No space left" in status["error"]
    assert (run / "events.jsonl").read_bytes().endswith(b"\n")
