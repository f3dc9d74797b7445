"""The ddp, allreduce and overhead suites run end to end with tiny settings and report their
documented keys with figures that hold together: every phase of the step-time breakdown is
non-negative and together they fit in the step, compute is a real part of it, and the bytes
match what the ring all-reduce must send for the model's gradients.

No timing thresholds: a test machine's speed proves nothing about the code. Each suite runs
once per module (they start real Dask clusters and, for ddp, real gloo process groups). The
PyTorch rows are checked in tests of their own, skipped (visibly) without PyTorch.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json

import pytest

from benchmarks import (
    allreduce_suite,
    bench_command,
    bubble_suite,
    charts_suite,
    ddp_suite,
    overhead_suite,
    torch_reference,
)
from benchmarks.distributed_suites import PHASE_NAMES, phase_breakdown
from workbench.events import EventLog
from workbench.events.records import PhaseEvent
from workbench.parallel.collectives import ring_bytes_per_rank

HAVE_TORCH = torch_reference.unavailable_reason("cpu") is None
needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="PyTorch is not installed")
without_torch = pytest.mark.skipif(HAVE_TORCH, reason="PyTorch is installed: its rows ran")
SPREAD_KEYS = {"median", "min", "q1", "q3", "max"}
DDP_FLAGS = ["ddp", "--hidden", "16", "--batch-size", "16", "--train-steps", "30"]
BUBBLE_FLAGS = [
    "bubble",
    "--bubble-hidden",
    "32,32,32",
    "--microbatches",
    "2",
    "--train-steps",
    "6",
]
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


def _gradient_bytes(layers: list[int]) -> int:
    """float32 bytes of an MLP's gradients: a kernel and a bias per layer."""
    return 4 * sum((fan_in + 1) * fan_out for fan_in, fan_out in itertools.pairwise(layers))


def _ring_traffic(layers: list[int], devices: int, steps: int) -> int:
    """Bytes every device of a ring all-reduce sends in ``steps`` steps, summed over devices:
    2(N-1)/N x the gradients per device and step (nothing else crosses in ``mirrored``)."""
    return steps * devices * int(ring_bytes_per_rank(_gradient_bytes(layers), devices))


def _check_breakdown(phases: dict, devices: int) -> None:
    """A run's step-time breakdown holds together."""
    assert {"step", *PHASE_NAMES, "allreduce_total", "other", "skew"} <= set(phases)
    step = phases["step"]
    assert step > 0
    assert all(phases[name] >= 0 for name in (*PHASE_NAMES, "allreduce_total", "skew"))
    # Compute is a real part of the step, never more than all of it.
    assert 0 < phases["compute"] <= step
    # A device runs compute, the exposed all-reduce and the update one after another inside
    # the steady window, so their per-device means fit in the step: what no phase accounts
    # for ("other") is never negative.
    assert sum(phases[name] for name in PHASE_NAMES) <= step * (1 + 1e-9)
    assert phases["other"] >= -1e-9 * step
    # The exposed all-reduce is the part of the whole one that the backward pass did not hide.
    assert phases["allreduce"] <= phases["allreduce_total"] * (1 + 1e-9)
    if devices == 1:
        # One device: its compute phase is the whole step (forward, backward, update); there
        # is nothing to exchange and no one to wait for. Most of the step is that phase.
        assert phases["allreduce_total"] == phases["update"] == phases["skew"] == 0
        assert phases["compute"] >= 0.5 * step
    else:
        assert phases["allreduce_total"] > 0 and phases["update"] > 0


def test_the_phase_breakdown_reads_the_event_log():
    # Two devices, three steps of 10 s; the first step is warm-up (excluded) and its absurd
    # durations would show if it were counted. Device a's all-reduce starts 1 s before its
    # compute ends (overlap with backward), device b's 1 s before.
    log = EventLog()
    log.emit(PhaseEvent("a", "compute", 0, 0.0, 9.0))
    log.emit(PhaseEvent("b", "allreduce", 0, 0.0, 9.0))
    for step in (1, 2):
        start = 10.0 * step
        for device, compute_end in (("a", 4.0), ("b", 6.0)):
            log.emit(PhaseEvent(device, "compute", step, start, start + compute_end))
            log.emit(PhaseEvent(device, "allreduce", step, start + compute_end - 1, start + 7))
            log.emit(PhaseEvent(device, "update", step, start + 7, start + 8))
    figures = phase_breakdown(log, global_batch=10, samples_per_second=1.0)  # 10 s a step
    assert figures == pytest.approx(
        {
            "step": 10_000.0,
            "compute": 5_000.0,  # (4 + 6) / 2
            "allreduce": 2_000.0,  # exposed, after compute: (3 + 1) / 2
            "allreduce_total": 3_000.0,  # (4 + 2) / 2
            "update": 1_000.0,
            "other": 2_000.0,  # 10 - 5 - 2 - 1
            "skew": 2_000.0,  # b's compute ends 2 s after a's
        }
    )
    _check_breakdown(figures, devices=2)


def _check_timed(result: dict, names) -> None:
    """Each named contender ran once and has positive throughput and step-time spreads."""
    for name in names:
        row = result["contenders"][name]
        assert row["available"]
        _positive_spread(row["samples_per_second"])
        _positive_spread(row["ms_per_step"])
        assert len(row["runs"]) == 1


@pytest.mark.integration
def test_ddp_suite_reports_every_contender(results):
    result = results["ddp"]
    assert {"suite", "settings", "contenders", "ratios"} <= set(result)
    settings = result["settings"]
    assert settings["layers"] == [784, 16, 10] and settings["per_device_batch"] == 8
    assert settings["warmup_steps"] == 3 and settings["timed_steps"] == 27
    assert set(result["contenders"]) == {
        "mirrored",
        "ddp",
        "mirrored_without_tls",
        "one_device",
        "torch",
    }
    _check_timed(result, ("mirrored", "mirrored_without_tls", "one_device"))
    tls = result["ratios"]["tls_over_plain_throughput"]
    assert tls["median"] > 0 and tls["min"] <= tls["median"] <= tls["max"]
    for name, devices in (("mirrored", settings["devices"]), ("one_device", 1)):
        row = result["contenders"][name]
        _check_breakdown(row["phases_ms"], devices)
        # The suite's ms/step is its run's step phase: the global batch over samples/s.
        assert row["ms_per_step"]["median"] == pytest.approx(row["phases_ms"]["step"])
        run = row["runs"][0]
        assert run["steady_steps"] == settings["timed_steps"]
        # Every step of the run, warm-up included, ring-all-reduced the gradients.
        expected = _ring_traffic(settings["layers"], devices, settings["steps"])
        assert run["bytes_communicated"] == (expected if devices > 1 else 0)


@pytest.mark.integration
@needs_torch
def test_ddp_suite_times_the_pytorch_peers(results):
    result = results["ddp"]
    _check_timed(result, ("ddp", "torch"))
    ratio = result["ratios"]["workbench_over_ddp_throughput"]
    assert ratio["median"] > 0 and ratio["target_min"] == 1.0
    assert isinstance(ratio["met"], bool)
    assert ratio["met"] is (ratio["median"] >= ratio["target_min"])
    mirrored, ddp = (
        result["contenders"][name]["samples_per_second"] for name in ("mirrored", "ddp")
    )
    assert ratio["of_medians"] == pytest.approx(mirrored["median"] / ddp["median"])
    assert result["ratios"]["one_device_over_torch_throughput"]["median"] > 0


@pytest.mark.integration
@without_torch
def test_without_torch_the_ddp_rows_say_why(results):
    result = results["ddp"]
    for name in ("ddp", "torch"):
        row = result["contenders"][name]
        assert not row["available"] and row["reason"] == torch_reference.TORCH_MISSING
    assert result["ratios"]["workbench_over_ddp_throughput"] is None


@pytest.mark.integration
def test_allreduce_suite_reports_fraction_of_bound(results):
    result = results["allreduce"]
    assert result["settings"]["workers"] == [2] and result["settings"]["repeats"] == 2
    rows = result["rows"]
    assert [(row["workers"], row["mib"]) for row in rows] == [
        (2, 1.0),
        (2, allreduce_suite.REFERENCE_GRADIENT_BYTES / 2**20),
    ]
    assert [row["bytes"] for row in rows] == [2**20, allreduce_suite.REFERENCE_GRADIENT_BYTES]
    for row in rows:
        _positive_spread(row["allreduce_ms"])
        _positive_spread(row["send_ms"])
        for key in ("p2p_gb_per_s", "bus_gb_per_s", "bound_ms", "fraction_of_bound"):
            assert row[key] > 0
        assert row["target_min_fraction"] == 0.7 and row["oversubscribed"] is False
        assert isinstance(row["met"], bool)
        assert row["met"] is (row["fraction_of_bound"] >= row["target_min_fraction"])
        _positive_spread(row["shift_ms"])
        assert row["shift_bound_ms"] > 0 and row["fraction_of_shift_bound"] > 0
        # The bound is what a rank of the ring must send, 2(N-1)/N x S, at the one-way
        # bandwidth B = S / send time; the bus figure is the same bytes over the all-reduce.
        wire = ring_bytes_per_rank(row["bytes"], row["workers"])
        assert row["p2p_gb_per_s"] == pytest.approx(row["bytes"] / row["send_ms"]["median"] / 1e6)
        assert row["bound_ms"] == pytest.approx(wire / (row["p2p_gb_per_s"] * 1e9) * 1e3)
        assert row["bus_gb_per_s"] == pytest.approx(wire / row["allreduce_ms"]["median"] / 1e6)
        assert row["fraction_of_bound"] == pytest.approx(
            row["bound_ms"] / row["allreduce_ms"]["median"]
        )
        # The ring's 2(N-1) steps, each one shift of S/N.
        steps = 2 * (row["workers"] - 1)
        assert row["shift_bound_ms"] == pytest.approx(steps * row["shift_ms"]["median"])


@pytest.mark.integration
@needs_torch
def test_allreduce_suite_times_gloo_against_its_own_bound(results):
    for row in results["allreduce"]["rows"]:
        peer = row["gloo"]
        assert peer["available"] is True
        _positive_spread(peer["allreduce_ms"])
        _positive_spread(peer["send_ms"])
        assert peer["fraction_of_bound"] > 0 and row["workbench_over_gloo_throughput"] > 0
        wire = ring_bytes_per_rank(row["bytes"], row["workers"])
        assert peer["bound_ms"] == pytest.approx(wire / (peer["p2p_gb_per_s"] * 1e9) * 1e3)
        assert row["workbench_over_gloo_throughput"] == pytest.approx(
            peer["allreduce_ms"]["median"] / row["allreduce_ms"]["median"]
        )


@pytest.mark.integration
@without_torch
def test_without_torch_the_gloo_rows_say_why(results):
    for row in results["allreduce"]["rows"]:
        assert row["gloo"]["available"] is False
        assert row["gloo"]["reason"] == torch_reference.TORCH_MISSING


@pytest.mark.integration
def test_overhead_suite_reports_overhead_per_strategy(results):
    result = results["overhead"]
    settings = result["settings"]
    assert settings["hidden"] == [8] and settings["batch_size"] == 8
    assert set(result["contenders"]) == {"one_device", "mirrored"}
    # synthetic:16:2:1024: 16 features, 2 classes.
    layers = [16, *settings["hidden"], 2]
    for row in result["contenders"].values():
        _positive_spread(row["ms_per_step"])
        _positive_spread(row["compute_ms"])
        assert set(row["overhead_ms"]) == SPREAD_KEYS
        # Overhead is the step time compute does not explain: never negative, since a
        # device's compute phase fits inside its step, and smaller than the step itself.
        assert row["overhead_ms"]["min"] >= 0
        assert row["overhead_ms"]["max"] < row["ms_per_step"]["max"]
        for run in row["runs"]:
            _check_breakdown(run["phases_ms"], row["devices"])
            expected = _ring_traffic(layers, row["devices"], settings["steps"])
            assert run["bytes_communicated"] == (expected if row["devices"] > 1 else 0)
    assert result["contenders"]["mirrored"]["devices"] == 2
    assert result["contenders"]["one_device"]["devices"] == 1


@pytest.mark.integration
def test_bubble_suite_compares_each_schedule_with_its_formula(results):
    result = results["bubble"]
    assert result["settings"]["hidden"] == [32, 32, 32] and result["target_points"] == 5.0
    rows = {row["schedule"]: row for row in result["rows"]}
    assert set(rows) == {"gpipe", "1f1b", "interleaved-1f1b", "zero-bubble"}
    # Two stages, two micro-batches, two virtual stages.
    assert rows["gpipe"]["theory"] == rows["1f1b"]["theory"] == pytest.approx(1 / 3)
    assert rows["interleaved-1f1b"]["theory"] == pytest.approx(1 / 5)
    assert set(rows["zero-bubble"]["action_ms"]) == {"F", "I", "W"}
    assert set(rows["interleaved-1f1b"]["action_ms"]) == {"F", "B"}
    for schedule, row in rows.items():
        bubble = row["bubble_fraction"]["median"]
        assert 0 < bubble < 1
        assert row["points_above_theory"] == pytest.approx(100 * (bubble - row["theory"]))
        near = abs(row["points_above_theory"]) <= 5
        below = bubble < rows["1f1b"]["bubble_fraction"]["median"]
        expected = {"gpipe": near, "1f1b": None}.get(schedule, near and below)
        assert row["met"] is expected
        assert 0 <= row["played"] < 1 and len(row["stage_action_ms"]) == 2
        _positive_spread(row["samples_per_second"])
    assert "| gpipe | 2 |" in bubble_suite.render(result)
    assert "| interleaved-1f1b V=2 | 2 |" in bubble_suite.render(result)


@pytest.mark.integration
def test_the_markdown_reports_have_their_tables(results):
    ddp = ddp_suite.render(results["ddp"])
    assert "| contender | samples/s (median) |" in ddp and "| workbench mirrored |" in ddp
    allreduce = allreduce_suite.render(results["allreduce"])
    assert "| workers | S (MiB) |" in allreduce and "of the bound" in allreduce
    assert "| processes | S (MiB) | gloo all-reduce ms |" in allreduce
    overhead = overhead_suite.render(results["overhead"])
    assert "| workbench one-device |" in overhead
    assert "| workbench mirrored, 2 devices |" in overhead


@pytest.mark.integration
@needs_torch
def test_the_ddp_report_compares_with_pytorch(results):
    ddp = ddp_suite.render(results["ddp"])
    assert "| PyTorch DDP (gloo) |" in ddp and "workbench mirrored / DDP samples/s" in ddp


def test_the_suites_are_listed_and_check_their_flags(capsys):
    assert bench_command(["--list"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in ("ddp", "allreduce", "overhead"))
    assert bench_command(["allreduce", "--allreduce-mib", "-1"]) == 2
    assert bench_command(["ddp", "--repeats", "0"]) == 2


@pytest.mark.integration
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
