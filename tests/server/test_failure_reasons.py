"""A run's record carries why it failed or restarted (status.json's ``failure_reasons``), which
the sidebar shows on the run's problem line."""

from __future__ import annotations

from workbench.server.manager import RunsManager


def test_the_run_list_carries_the_failure_reasons(runs):
    reasons = ["worker task1 died: killed by signal 9", "stalled 30 s in the all-reduce"]
    runs.run("failed", state="failed", failure_reasons=reasons)
    runs.run("clean")
    listed = {record["id"]: record for record in RunsManager().runs()}
    assert listed["failed"]["failure_reasons"] == reasons
    assert listed["clean"]["failure_reasons"] in (None, [])  # none, or not recorded
