"""The run list stays cheap for a sidebar polling twice a second: with 50 runs in the store, a
second listing reads again only the live run and a run whose status.json changed, and lists the
same records as a fresh manager would."""

from __future__ import annotations

import pytest

from workbench.server.manager import RunsManager
from workbench.store import StoredRun
from workbench.store import run_store as run_store_module


@pytest.fixture
def reads(monkeypatch) -> list[str]:
    """The run ids whose files are read for a listing entry, in order."""
    seen: list[str] = []
    entry = StoredRun.entry

    def counting(self: StoredRun):
        seen.append(self.run_id)
        return entry(self)

    monkeypatch.setattr(run_store_module.StoredRun, "entry", counting)
    return seen


def test_a_second_listing_reads_only_what_can_have_changed(runs, reads):
    for index in range(49):
        runs.run(f"old-{index:02d}", steps=1, started=1000.0 + index)
    live = runs.run("live", steps=4, recorded=1, state=None, started=2000.0)
    manager = RunsManager()
    first = manager.runs()
    assert len(first) == 50 and first[0]["id"] == "live"
    reads.clear()
    assert manager.runs() == first
    assert manager.clusters() == []
    assert reads == ["live", "live"]  # whether its process lives is in no file

    runs.record(live, 1)  # the live run moves; an old run's status is rewritten
    runs.store.open("old-07").path.joinpath("status.json").write_text(
        '{"state": "failed", "started": 1007.0, "error": "disk full"}', encoding="utf-8"
    )
    reads.clear()
    listed = manager.runs()
    assert sorted(reads) == ["live", "old-07"]
    assert listed == RunsManager().runs()
    assert next(r for r in listed if r["id"] == "old-07")["error"] == "disk full"
    assert listed[0]["step"] == 2
