"""The what-if table agrees with itself and with the runs: each row's prediction is the one a
run of that configuration reports from the same cached calibration, each loser's listed
differences add up to its gap, and a plan on a cached calibration measures nothing (no
cluster, no timing). Fixed calibrations, no cluster."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from tests.planner.fixed_calibration import (
    CONFIG,
    SMALL,
    cluster_calibration,
    in_process_calibration,
    parameter_server_calibration,
    write_cache,
)
from workbench.calibration import probe
from workbench.cli.main import main
from workbench.launch import calibrate as launch_calibrate
from workbench.launch.calibrate import model_for
from workbench.launch.runner import predicted_figures
from workbench.launch.what_if import plan_what_if
from workbench.optim import make_optimizer
from workbench.planner.device_costs import measured_costs
from workbench.planner.what_if import what_if
from workbench.strategies import STRATEGIES, validate_config
from workbench.training.job import TrainOutcome

pytestmark = pytest.mark.integration


class Measured(AssertionError):
    """Raised by anything that would start a cluster or time a node."""


@pytest.fixture
def nothing_measured(monkeypatch):
    def refuse(*args, **kwargs):
        raise Measured("a cached plan measured something")

    monkeypatch.setattr(launch_calibrate, "start_run_cluster", refuse)
    monkeypatch.setattr(probe, "measure_device", refuse)


@pytest.fixture
def cached(store_root):
    return write_cache(
        store_root,
        cluster_calibration(),
        parameter_server_calibration(),
        in_process_calibration(),
    )


def _row(rows: list[dict], config) -> dict:
    def same(row: dict) -> bool:
        if row["strategy"] != config.strategy:
            return False
        return all(
            config.options.get(key, getattr(config, key, None)) == value
            for key, value in row.items()
            if key in ("allreduce", "compression", "ps", "mode", "microbatches", "schedule")
        )

    (row,) = [row for row in rows if same(row)]
    return row


def _run_prediction(config, store) -> float:
    """What a run of ``config`` on the local cluster reports: its strategy calibrates the
    session (nothing to measure: a session without a client would fail if it tried), then
    predicts from the calibration it holds."""
    strategy = STRATEGIES[config.strategy]
    names = strategy.device_names(config, "cpu")
    session = SimpleNamespace(
        client=None,
        device_names=names,
        addresses=[f"tcp://127.0.0.1:{50000 + rank}" for rank in range(len(names))],
        device_type="cpu",
        nccl_usable=False,
        run_id="fixed",
    )
    job = SimpleNamespace(
        config=config,
        model=model_for(config),
        optimizer=make_optimizer(config.optimizer),
        device_type="cpu",
    )
    calibrated = strategy._calibrated(job, session, lambda line: None, None)
    outcome = TrainOutcome(
        None, "cpu", calibration=calibrated.calibration, calibration_seconds=calibrated.seconds
    )
    figures, _ = predicted_figures(config, job, outcome, 1000.0, lambda line: None)
    return figures["predicted_step_ms"]


@pytest.mark.parametrize(
    "options",
    [
        {"strategy": "mirrored", "allreduce": "ring"},
        {"strategy": "mirrored", "allreduce": "hierarchical-copy"},
        {"strategy": "pipeline", "stages": 2, "microbatches": 2, "schedule": "1f1b"},
        {"strategy": "parameter-server", "ps": 1, "mode": "sync"},
    ],
)
def test_a_run_reports_the_step_of_its_what_if_row(cached, nothing_measured, options):
    plan = plan_what_if(CONFIG, None, lambda line: None)
    rows = [row.to_dict() for row in plan.rows]
    config = validate_config(CONFIG.replace(**options))
    assert _run_prediction(config, cached) == _row(rows, config)["predicted_step_ms"]


def test_a_parameter_server_row_reads_the_calibration_its_run_reads(cached, nothing_measured):
    # The run's cluster (workers and a shard) is slower than the plan's in the cache: the
    # row is predicted from the run's, not from the plan's workers with a borrowed shard.
    plan = plan_what_if(CONFIG, None, lambda line: None)
    rows = [row.to_dict() for row in plan.rows]
    config = validate_config(CONFIG.replace(strategy="parameter-server", ps=1, mode="sync"))
    (cached.root / "calibrations" / f"{parameter_server_calibration().signature}.json").unlink()
    without = [row.to_dict() for row in plan_what_if(CONFIG, None, lambda line: None).rows]
    assert _row(rows, config)["predicted_step_ms"] > _row(without, config)["predicted_step_ms"]


def test_each_losers_differences_add_up_to_its_gap():
    model = model_for(CONFIG)
    costs = measured_costs(cluster_calibration())
    rows = what_if(CONFIG, model, make_optimizer(CONFIG.optimizer), costs, CONFIG.devices)
    rows = [row.to_dict() for row in rows]
    predicted = [row for row in rows if row["predicted_step_ms"] is not None]
    fastest = predicted[0]
    assert fastest["reason"] == "fastest"
    for row in predicted[1:]:
        gap = round(row["predicted_step_ms"] - fastest["predicted_step_ms"], 2)
        listed = row["loses_by_ms"] or {}
        assert sum(listed.values()) == pytest.approx(gap, abs=0.011)
        # The reason says the same: the gap, then each part's signed difference.
        total, *parts = re.findall(r"[+-]\d+\.\d\d", row["reason"])
        assert float(total) == pytest.approx(gap, abs=0.011)
        assert sum(float(part) for part in parts) == pytest.approx(float(total), abs=1e-9)
        # Every part of the step is accounted for: the parts add up to the step.
        # (Mesh rows also split out their tensor and data groups' all-reduces.)
        parts_ms = ("compute", "communication", "bubble", "tensor_allreduce", "data_allreduce")
        step_parts = sum(row.get(f"{part}_ms", 0.0) for part in parts_ms)
        assert step_parts + row["overhead_ms"] == pytest.approx(row["predicted_step_ms"], abs=1e-3)


def test_a_second_plan_measures_nothing_and_starts_no_cluster(cached, nothing_measured, capsys):
    assert main(["plan", "--what-if", "--devices", "2", *SMALL]) == 0
    printed = capsys.readouterr()
    assert "nothing measured" in printed.err
    assert "timing" not in printed.err
    assert "fastest" in printed.out
