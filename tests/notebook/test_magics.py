"""``%dtrain`` through a real IPython shell: runs start in the background and return a handle;
the handle waits, stops and exposes metrics and events; every run lands in the run store."""

from __future__ import annotations

import pandas as pd
import pytest

from workbench.notebook import BackgroundRun
from workbench.store import RunStore, chrome_trace


@pytest.mark.integration
def test_a_line_magic_run_trains_in_the_background_and_stores_its_handle(shell, store_root):
    returned = shell.run_line_magic("dtrain", "--steps 6 --hidden 16 --batch-size 32 -o run")
    run = shell.user_ns["run"]
    assert run is returned and isinstance(run, BackgroundRun)
    run.wait(120)
    assert run.state == "finished" and run.summary["steps"] == 6
    table = pd.DataFrame(run.metrics)
    assert table["step"].tolist() == list(range(6))
    assert table["loss"].notna().all() and table["loss"].iloc[-1] < table["loss"].iloc[0] * 2
    assert any(event.phase == "compute" for event in run.events if hasattr(event, "phase"))

    stored = RunStore(store_root).open(run.run_id)
    assert stored.status()["state"] == "finished" and stored.status()["step"] == 6
    assert stored.summary()["test_accuracy"] == run.summary["test_accuracy"]
    assert stored.config()["steps"] == 6
    assert len(stored.events()) == len(run.events)
    trace = chrome_trace(stored.events())["traceEvents"]
    assert {e["name"] for e in trace if e["ph"] == "X"} >= {"compute"}


@pytest.mark.integration
def test_wait_flag_returns_the_summary(shell):
    summary = shell.run_line_magic("dtrain", "--steps 2 --hidden 8 --wait")
    assert summary["steps"] == 2 and summary["strategy"] == "one-device"


@pytest.mark.integration
def test_a_cell_magic_trains_the_model_the_cell_builds(shell):
    cell = (
        "from workbench import Dense, Flatten, Sequential\n"
        "model = Sequential([Flatten(), Dense(24, activation='relu'), Dense(10)],\n"
        "                   input_shape=(1, 8, 8))\n"
    )
    run = shell.run_cell_magic("dtrain", "--steps 3", cell)
    run.wait(120)
    assert run.state == "finished"
    assert run.result.parameters["dense_0/kernel"].shape == (64, 24)


@pytest.mark.integration
def test_stop_ends_a_live_run_early_and_it_is_recorded_as_stopped(shell, store_root, capsys):
    run = shell.run_line_magic("dtrain", "--steps 100000 --hidden 16")
    assert not run.done
    shell.run_line_magic("dtrain", "status")
    assert run.run_id in capsys.readouterr().out
    shell.run_line_magic("dtrain", f"stop {run.run_id[:18]}")
    run.wait(120)
    assert run.state == "stopped" and run.step < 100000
    assert RunStore(store_root).open(run.run_id).status()["state"] == "stopped"
    shell.run_line_magic("dtrain", "list")
    listed = capsys.readouterr().out
    assert run.run_id in listed and "stopped" in listed
    shell.run_line_magic("dtrain", "status")
    assert "no live runs" in capsys.readouterr().out


@pytest.mark.integration
def test_a_run_that_fails_after_it_started_reports_through_its_handle(shell, store_root):
    from distributed import LocalCluster

    # One worker, two devices asked for: only connecting to the cluster can tell.
    with LocalCluster(
        n_workers=1, threads_per_worker=1, host="127.0.0.1", dashboard_address=None
    ) as cluster:
        run = shell.run_line_magic(
            "dtrain",
            "--steps 3 --hidden 8 --strategy mirrored --devices 2 "
            f"--cluster {cluster.scheduler_address}",
        )
        with pytest.raises(Exception, match="has 1 workers"):
            run.wait(120)
    assert run.state == "failed"
    assert "has 1 workers" in RunStore(store_root).open(run.run_id).status()["error"]


def test_the_magic_help_lists_every_flag_with_its_allowed_values(shell):
    doc = shell.find_line_magic("dtrain").__doc__
    for text in ("--strategy", "mirrored", "parameter-server", "--allreduce", "ring", "-o NAME"):
        assert text in doc
