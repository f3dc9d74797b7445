"""How soon a started run shows: the latency suite's milestones, and the run store's record
made before the run is prepared."""

from __future__ import annotations

import pytest

from benchmarks.latency_suite import MILESTONES, LatencySettings, render, run_latency_suite
from workbench.config import ConfigError, RunConfig
from workbench.launch import background_run
from workbench.launch.background_run import BackgroundRun
from workbench.runtime.cluster import ships_dataset
from workbench.store import RunStore


@pytest.mark.integration
def test_the_suite_reports_every_milestone_in_order(tmp_path, monkeypatch):
    monkeypatch.setenv("DTRAIN_RUN_STORE", str(tmp_path))
    settings = LatencySettings(steps=2, hidden=(16,), repeats=1, fresh_process=False)
    result = run_latency_suite(settings, progress=lambda line: None)
    reached = [result["seconds"][name]["median"] for name in MILESTONES]
    assert all(seconds >= 0 for seconds in reached)
    listed, prepared, cluster, data, calibrated, first_step, first_point = reached
    assert listed <= prepared <= cluster <= data <= calibrated <= first_step <= first_point
    assert all(label in render(result) for label in MILESTONES.values())


def test_a_run_is_listed_at_step_0_while_prepared_and_taken_back_if_refused(tmp_path, monkeypatch):
    store = RunStore(tmp_path / "runs")
    seen = []
    prepare = background_run.prepare_run

    def watched(*arguments, **options):
        entry = store.entries()[-1]  # the newest
        seen.append((entry.state, entry.status["step"], entry.status["steps"]))
        return prepare(*arguments, **options)

    monkeypatch.setattr(background_run, "prepare_run", watched)
    config = RunConfig(strategy="mirrored", devices=2, steps=7, hidden=(16,))
    run = BackgroundRun(config, store=store, begin=False)
    assert seen == [("running", 0, 7)]
    assert store.open(run.run_id).status()["steps"] == 7

    # A data set that cannot be read is refused while preparing: its record goes again.
    damaged = tmp_path / "damaged.npz"
    damaged.write_bytes(b"not a zip archive")
    with pytest.raises(ConfigError, match="--dataset"):
        BackgroundRun(RunConfig(dataset=f"npz:{damaged}", steps=2), store=store, begin=False)
    assert len(seen) == 2 and [entry.run_id for entry in store.entries()] == [run.run_id]


def test_a_local_cluster_gets_digits_from_the_client():
    assert ships_dataset(RunConfig(strategy="mirrored", devices=2))
    assert not ships_dataset(RunConfig(strategy="mirrored", devices=2, cluster="tcp://h:8786"))
    assert not ships_dataset(RunConfig(strategy="mirrored", devices=2, dataset="synthetic"))
