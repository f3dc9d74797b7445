"""The ddp, allreduce and overhead suites run end to end with tiny settings and report their
documented keys with positive figures.

No timing thresholds: a test machine's speed proves nothing about the code. Each suite runs
once per module (they start real Dask clusters and, for ddp, real gloo process groups).
"""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from workbench.bench import (
    allreduce_suite,
    bench_command,
    bubble_suite,
    charts_suite,
    ddp_suite,
    overhead_suite,
    torch_reference,
)
from workbench.bench.distributed_suites import PHASE_NAMES

HAVE_TORCH = torch_reference.unavailable_reason("cpu") is None
SPREAD_KEYS = {"median", "min", "q1", "q3", "max"}
DDP_FLAGS = ["ddp", "--hidden", "16", "--batch-size", "16", "--train-steps", "30"]
BUBBLE_FLAGS = ["bubble", "--bubble-hidden", "32,32", "--microbatches", "2,4", "--train-steps", "6"]
ALLREDUCE_FLAGS = ["allreduce", "--allreduce-mib", "1", "--allreduce-workers", "2"]


@pytest.fixture(scope="module")
def results() -> dict:
    """Every suite's JSON result, run once with tiny settings (stdout redirected here:
    capsys belongs to one test)."""
    out: dict = {}
    for name, argv in {
        "ddp": [*DDP_FLAGS, "--repeats", "1"],
        "allreduce": [*ALLREDUCE_FLAGS, "--transfers", "2"],
        "overhead": ["overhead", "--train-steps", "30", "--repeats", "1"],
        "bubble": [*BUBBLE_FLAGS, "--repeats", "1"],
        "charts": ["charts", "--train-steps", "30", "--repeats", "1"],
    }.items():
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            assert bench_command([*argv, "--json"]) == 0
        out[name] = json.loads(buffer.getvalue())["suites"][name]
    return out


def _positive_spread(figures: dict) -> None:
    assert set(figures) == SPREAD_KEYS
    assert figures["min"] > 0 and figures["median"] > 0


def test_ddp_suite_reports_both_contenders(results):
    result = results["ddp"]
    assert {"suite", "settings", "contenders", "ratios"} <= set(result)
    settings = result["settings"]
    assert settings["layers"] == [784, 16, 10] and settings["per_device_batch"] == 8
    assert settings["warmup_steps"] == 3 and settings["timed_steps"] == 27
    assert set(result["contenders"]) == {"mirrored", "ddp", "one_device", "torch"}
    for name, row in result["contenders"].items():
        if name in ("ddp", "torch") and not HAVE_TORCH:
            assert not row["available"]
            continue
        assert row["available"]
        _positive_spread(row["samples_per_second"])
        _positive_spread(row["ms_per_step"])
        assert len(row["runs"]) == 1
    phases = result["contenders"]["mirrored"]["phases_ms"]
    assert {"step", *PHASE_NAMES, "allreduce_total", "other", "skew"} <= set(phases)
    assert phases["compute"] > 0 and phases["allreduce_total"] > 0 and phases["step"] > 0
    assert result["contenders"]["mirrored"]["runs"][0]["bytes_communicated"] > 0
    ratio = result["ratios"]["workbench_over_ddp_throughput"]
    if HAVE_TORCH:
        assert ratio["median"] > 0 and ratio["target_min"] == 1.0
        assert isinstance(ratio["met"], bool)
        assert result["ratios"]["one_device_over_torch_throughput"]["median"] > 0
    else:
        assert ratio is None


def test_allreduce_suite_reports_fraction_of_bound(results):
    result = results["allreduce"]
    assert result["settings"]["workers"] == [2] and result["settings"]["repeats"] == 2
    rows = result["rows"]
    assert [(row["workers"], row["mib"]) for row in rows] == [
        (2, 1.0),
        (2, allreduce_suite.REFERENCE_GRADIENT_BYTES / 2**20),
    ]
    for row in rows:
        _positive_spread(row["allreduce_ms"])
        _positive_spread(row["send_ms"])
        for key in ("p2p_gb_per_s", "bus_gb_per_s", "bound_ms", "fraction_of_bound"):
            assert row[key] > 0
        assert row["target_min_fraction"] == 0.7 and row["oversubscribed"] is False
        assert isinstance(row["met"], bool)
        _positive_spread(row["shift_ms"])
        assert row["shift_bound_ms"] > 0 and row["fraction_of_shift_bound"] > 0
        peer = row["gloo"]
        assert peer["available"] is HAVE_TORCH
        if HAVE_TORCH:
            _positive_spread(peer["allreduce_ms"])
            _positive_spread(peer["send_ms"])
            assert peer["fraction_of_bound"] > 0 and row["workbench_over_gloo_throughput"] > 0


def test_overhead_suite_reports_overhead_per_strategy(results):
    result = results["overhead"]
    assert result["settings"]["hidden"] == [8] and result["settings"]["batch_size"] == 8
    assert set(result["contenders"]) == {"one_device", "mirrored"}
    for row in result["contenders"].values():
        _positive_spread(row["ms_per_step"])
        _positive_spread(row["compute_ms"])
        assert set(row["overhead_ms"]) == SPREAD_KEYS
        assert row["ms_per_step"]["median"] == pytest.approx(
            row["compute_ms"]["median"] + row["overhead_ms"]["median"], rel=0.5
        )
    assert result["contenders"]["mirrored"]["phases_ms"]["allreduce_total"] > 0
    assert result["contenders"]["one_device"]["phases_ms"]["allreduce"] == 0


def test_bubble_suite_compares_both_schedules_with_the_formula(results):
    result = results["bubble"]
    assert result["settings"]["hidden"] == [32, 32] and result["target_points"] == 5.0
    rows = {(row["schedule"], row["microbatches"]): row for row in result["rows"]}
    assert set(rows) == {(s, m) for s in ("gpipe", "1f1b") for m in (2, 4)}
    for (schedule, microbatches), row in rows.items():
        assert row["theory"] == pytest.approx(1 / (microbatches + 1))  # two stages
        bubble = row["bubble_fraction"]["median"]
        assert 0 < bubble < 1
        assert row["points_above_theory"] == pytest.approx(100 * (bubble - row["theory"]))
        assert row["met"] is (None if schedule == "1f1b" else abs(row["points_above_theory"]) <= 5)
        _positive_spread(row["samples_per_second"])
    assert "| gpipe | 4 |" in bubble_suite.render(result)


def test_the_markdown_reports_have_their_tables(results):
    ddp = ddp_suite.render(results["ddp"])
    assert "| contender | samples/s (median) |" in ddp and "| workbench mirrored |" in ddp
    if HAVE_TORCH:
        assert "| PyTorch DDP (gloo) |" in ddp and "workbench mirrored / DDP samples/s" in ddp
    allreduce = allreduce_suite.render(results["allreduce"])
    assert "| workers | S (MiB) |" in allreduce and "of the bound" in allreduce
    assert "| processes | S (MiB) | gloo all-reduce ms |" in allreduce
    overhead = overhead_suite.render(results["overhead"])
    assert "| workbench one-device |" in overhead
    assert "| workbench mirrored, 2 devices |" in overhead


def test_the_suites_are_listed_and_check_their_flags(capsys):
    assert bench_command(["--list"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in ("ddp", "allreduce", "overhead"))
    assert bench_command(["allreduce", "--allreduce-mib", "-1"]) == 2
    assert bench_command(["ddp", "--repeats", "0"]) == 2


def test_charts_suite_measures_each_strategy_with_charts_on_and_off(results):
    result = results["charts"]
    assert [row["strategy"] for row in result["rows"]] == ["one-device", "mirrored"]
    for row in result["rows"]:
        _positive_spread(row["off_samples_per_second"])
        _positive_spread(row["on_samples_per_second"])
        assert row["on_over_off"] == pytest.approx(
            row["on_samples_per_second"]["median"] / row["off_samples_per_second"]["median"]
        )
        # The charts really refreshed while the run trained, and never above 10 a second.
        assert all(run["refreshes"] >= 1 for run in row["runs"]["on"])
        assert all(run["refreshes"] == 0 for run in row["runs"]["off"])
        assert row["refreshes_per_second"]["max"] <= 10.5
    assert "| one-device (1 device) |" in charts_suite.render(result)
