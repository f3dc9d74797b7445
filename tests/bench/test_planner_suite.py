"""The planner suite runs every configuration, reads each run's predicted and measured step,
judges the targets from them and times the planner on described clusters."""

import contextlib
import io
import json
import statistics

import pytest

from benchmarks import planner_suite
from benchmarks.command import bench_command


@pytest.fixture(scope="module")
def result() -> dict:
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        argv = ["planner", "--planner-models", "mlp", "--train-steps", "40", "--repeats", "1"]
        # The smallest described clusters that show the timing rows (the suite's own default
        # goes up to 4,096 devices).
        argv += ["--scale-hosts", "1,8"]
        assert bench_command([*argv, "--json"]) == 0
    return json.loads(buffer.getvalue())["suites"]["planner"]


@pytest.mark.integration
def test_every_configuration_has_a_prediction_and_a_measurement(result):
    rows = result["rows"]
    assert len(rows) == len(planner_suite.CONFIGURATIONS)
    for row in rows:
        predicted, measured = row["predicted_ms"]["median"], row["measured_ms"]["median"]
        assert predicted > 0 and measured > 0
        assert len(row["errors"]) == 1  # one run each: its own prediction against its measurement
        assert row["error"] == pytest.approx(predicted / measured - 1)
        assert row["error"] == pytest.approx(statistics.median(row["errors"]))
        assert row["within_close"] == (abs(row["error"]) <= planner_suite.CLOSE)
    share = sum(row["within_close"] for row in rows) / len(rows)
    assert result["share_within_close"] == pytest.approx(share)
    assert result["met"] == (
        share >= planner_suite.SHARE_CLOSE and all(row["within_far"] for row in rows)
    )


@pytest.mark.integration
def test_the_planner_is_timed_on_the_described_clusters_asked_for(result):
    devices = [row["devices"] for row in result["scale"]]
    assert devices == [8, 64]
    assert all(row["configurations"] >= 5 and row["seconds"] > 0 for row in result["scale"])


@pytest.mark.integration
def test_the_report_has_its_tables(result):
    text = planner_suite.render(result)
    assert "| mlp | mirrored | devices=2 allreduce=ring |" in text
    assert "| 8 hosts | 64 |" in text


def test_a_rows_error_pairs_each_runs_prediction_with_its_own_measurement(monkeypatch):
    # The first configuration's runs: right each time on a machine that changed between runs,
    # so the medians of the two columns come from different runs and differ by 17%.
    first = [(10.0, 8.0), (14.0, 14.0), (6.0, 12.0)]
    draws = {0: iter(first)}

    def run(settings, model, configuration):
        index = planner_suite.CONFIGURATIONS.index(configuration)
        predicted, measured = next(draws[index]) if index in draws else (5.0, 5.0)
        return {"predicted": predicted, "measured": measured}

    monkeypatch.setattr(planner_suite, "_run", run)
    monkeypatch.setattr(planner_suite, "_time_the_planner", lambda batch, hosts: [])
    monkeypatch.setattr(planner_suite, "_time_the_mesh_search", lambda: {})
    settings = planner_suite.PlannerSettings(models=("mlp",), repeats=3)
    result = planner_suite.run_planner_suite(settings, lambda line: None)
    row = result["rows"][0]
    assert row["errors"] == pytest.approx([0.25, 0.0, -0.5])
    assert row["error"] == 0.0 and row["within_close"]
    assert row["predicted_ms"]["median"] / row["measured_ms"]["median"] - 1 == pytest.approx(-1 / 6)


def test_the_suite_times_up_to_thousands_of_devices_by_default():
    assert planner_suite.PlannerSettings().scale_hosts[-1] * 8 >= 4096


def test_a_bad_scale_is_refused_by_its_flag(capsys):
    assert bench_command(["planner", "--scale-hosts", "8,0"]) == 2
    assert "--scale-hosts" in capsys.readouterr().err


def test_an_unknown_model_is_refused_by_its_flag(capsys):
    assert bench_command(["planner", "--planner-models", "resnet"]) == 2
    assert "--planner-models" in capsys.readouterr().err
