"""The memory-plan suite runs its rows, compares each device's predicted peak with the peak
its run measured, judges the targets from them and renders the table."""

import contextlib
import io
import json

import pytest

from benchmarks import memory_plan_suite
from benchmarks.command import bench_command
from workbench.ir.memory import CATEGORIES

TINY = [
    "memory-plan",
    "--models",
    "mlp",
    "--rows",
    "mirrored,zero-3",
    "--zero-devices",
    "2",
    "--hidden",
    "16",
    "--mlp-dataset",
    "digits",
    "--train-steps",
    "2",
    "--batch-size",
    "64",
]


@pytest.fixture(scope="module")
def result() -> dict:
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert bench_command([*TINY, "--json"]) == 0
    return json.loads(buffer.getvalue())["suites"]["memory-plan"]


@pytest.mark.integration
def test_each_row_compares_the_same_devices_predicted_and_measured(result):
    rows = result["rows"]
    assert [(row["model"], row["row"]) for row in rows] == [("mlp", "mirrored"), ("mlp", "zero-3")]
    names = [list(row["devices_measured"]) for row in rows]
    assert names[0] == names[1] and len(names[0]) == 2
    for row in rows:
        for entry in row["devices_measured"].values():
            assert entry["predicted"] == sum(entry["predicted_by_category"].values())
            assert entry["measured"] == sum(entry["measured_at_peak"].values()) > 0
            assert set(entry["measured_high_water"]) == set(CATEGORIES)
            assert entry["error"] == pytest.approx(entry["predicted"] / entry["measured"] - 1)
        worst = max((e["error"] for e in row["devices_measured"].values()), key=abs)
        assert row["error"] == worst
        assert row["within"] == (abs(worst) <= memory_plan_suite.CLOSE)
    share = sum(row["within"] for row in rows) / len(rows)
    assert result["share_within_close"] == pytest.approx(share)


@pytest.mark.integration
def test_zero_3_is_judged_against_mirrored_on_as_many_devices(result):
    (zero,) = result["zero"]
    assert (zero["model"], zero["zero_stage"], zero["devices"]) == ("mlp", 3, 2)
    # Two ranks: each keeps half the parameters and half the momentum between steps.
    assert zero["resident_ratio"] == pytest.approx(0.5, abs=0.01)
    # The gathered parameters sit beside the shards while a pass reads them.
    assert zero["high_water_ratio"] > zero["resident_ratio"]
    assert zero["met"] is False


@pytest.mark.integration
def test_the_report_has_its_table_and_verdicts(result):
    text = memory_plan_suite.render(result)
    assert "| mlp | mirrored devices=2 | worker:0-1 |" in text
    assert "| mlp | sharded devices=2 stage=3 | worker:0-1 |" in text
    assert "activations KiB (pred / meas)" in text
    assert "- within 10% on every device:" in text
    assert "resident shards 0.50, measured high-water" in text


def test_an_unknown_row_is_refused_by_its_flag(capsys):
    assert bench_command(["memory-plan", "--rows", "mirrored,zero-4"]) == 2
    assert "--rows" in capsys.readouterr().err
