"""The step suite: the contenders agree, a broken one is caught, the command runs end to end,
and its page-fault figures count what the steps really did.

No timing thresholds: a test machine's speed proves nothing about the code.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import math
import mmap
from dataclasses import replace

import numpy as np
import pytest

from benchmarks import bench_command, timing, torch_reference
from benchmarks.step_suite import (
    AgreementError,
    StepContender,
    StepSettings,
    build_contender,
    check_agreement,
    initial_parameters,
    make_batch,
    open_contenders,
)
from benchmarks.timing import Contender, ProcessContender, Spread, interleaved_rounds, rotation
from workbench.runtime import gpu_count

TINY = StepSettings(batch_size=16, hidden=(32, 32))
TINY_FLAGS = ["--rounds", "2", "--steps-per-round", "1", "--hidden", "32,32", "--batch-size", "16"]
HAVE_TORCH = torch_reference.unavailable_reason("cpu") is None
needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="PyTorch is not installed")
counts_faults = pytest.mark.skipif(
    timing.resource is None, reason="no resource module: page faults read as 0 here"
)


@pytest.mark.integration
@pytest.mark.parametrize("settings", [TINY, StepSettings()], ids=["tiny", "reference-size"])
def test_all_contenders_compute_the_same_step(settings):
    with open_contenders(replace(settings, isolation="none")) as (contenders, missing):
        report = check_agreement(contenders)
    expected = {"workbench", "numpy", "torch"} if HAVE_TORCH else {"workbench", "numpy"}
    assert set(report["losses"]) == expected and set(missing) == {"torch"} - expected
    assert all(np.isfinite(loss) for loss in report["losses"].values())


@pytest.mark.integration
def test_contenders_in_worker_processes_agree_too():
    with open_contenders(TINY) as (contenders, _):
        assert all(isinstance(contender, ProcessContender) for contender in contenders)
        report = check_agreement(contenders)
    assert report["max_relative_update_difference"]["numpy"] == 0.0


def _workbench_and(settings: StepSettings, initial: dict[str, np.ndarray]):
    """The honest workbench contender beside a hand-written one built from ``settings`` and
    ``initial`` (which a test alters to break it)."""
    x, y = make_batch(TINY)
    honest = build_contender("workbench", TINY, initial_parameters(TINY), x, y)
    return [honest, build_contender("numpy", settings, initial, x, y)]


@pytest.mark.parametrize(
    ("learning_rate", "shift", "message"),
    [
        (0.02, 0.0, "update of dense_0/kernel differs"),
        (0.01 * (1 + 1e-2), 0.0, "update of dense_0/kernel differs"),
        (0.01, 1e-3, "dense_2/bias did not start from"),
    ],
    ids=["double-learning-rate", "learning-rate-off-by-1%", "different-start"],
)
def test_a_broken_contender_is_caught(learning_rate, shift, message):
    initial = initial_parameters(TINY)
    initial["dense_2/bias"] = initial["dense_2/bias"] + np.float32(shift)
    broken = StepSettings(batch_size=16, hidden=(32, 32), learning_rate=learning_rate)
    with pytest.raises(AgreementError, match=message):
        check_agreement(_workbench_and(broken, initial))


def test_a_wrong_loss_is_caught():
    workbench, honest = _workbench_and(TINY, initial_parameters(TINY))
    lying = StepContender(
        "lying", lambda: float(honest.run()) * 1.01, honest.synchronize, honest.parameters
    )
    with pytest.raises(AgreementError, match="lying: loss"):
        check_agreement([workbench, lying])


def _run_json(capsys, argv: list[str]) -> dict:
    assert bench_command(argv) == 0
    return json.loads(capsys.readouterr().out)


@pytest.fixture(scope="module")
def step_report() -> dict:
    """``dtrain bench step --json`` with tiny settings, run once for the module (stdout
    redirected here: capsys belongs to one test)."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert bench_command(["step", *TINY_FLAGS, "--json"]) == 0
    return json.loads(buffer.getvalue())


@pytest.mark.integration
def test_the_suite_runs_end_to_end_with_json(step_report):
    report = step_report
    assert set(report) == {"command", "machine", "suites"}
    assert {"cpu", "cores", "numpy", "thread_pools"} <= set(report["machine"])
    result = report["suites"]["step"]
    assert {"suite", "settings", "flops_per_step", "agreement", "contenders", "ratios"} <= set(
        result
    )
    assert result["settings"]["layers"] == [784, 32, 32, 10]
    for name in ("workbench", "numpy"):
        row = result["contenders"][name]
        assert row["available"]
        assert row["ms_per_step"]["median"] > 0 and row["samples_per_second"] > 0
        assert len(row["round_ms"]) == 2 and min(row["round_ms"]) > 0
        # A count per step (what it counts is checked in the page-fault tests below).
        faults = row["page_faults_per_step"]
        assert type(faults) in (int, float) and math.isfinite(faults) and faults >= 0
    ratios = result["ratios"]
    assert ratios["workbench_over_numpy_step_time"]["median"] > 0
    assert ratios["workbench_over_numpy_step_time"]["met"] is None  # not the reference size


@pytest.mark.integration
@needs_torch
def test_the_suite_times_torch_beside_the_others(step_report):
    result = step_report["suites"]["step"]
    row = result["contenders"]["torch"]
    assert row["available"] and row["ms_per_step"]["median"] > 0
    assert result["ratios"]["workbench_over_torch_throughput"]["median"] > 0


PAGES = 256  # 1 MiB of 4 KiB pages


class FreshPages:
    """A unit of work with a known page-fault count: it maps anonymous memory straight from
    the kernel (not the allocator's reused heap) and writes one byte per page, so each page
    faults once. ``run``/``synchronize`` make it a contender, here or in a worker process."""

    def run(self) -> None:
        with mmap.mmap(-1, PAGES * mmap.PAGESIZE, flags=mmap.MAP_PRIVATE) as memory:
            if hasattr(mmap, "MADV_NOHUGEPAGE"):
                memory.madvise(mmap.MADV_NOHUGEPAGE)  # one fault per page, not per huge page
            for offset in range(0, len(memory), mmap.PAGESIZE):
                memory[offset] = 1

    def synchronize(self) -> None:
        return None


class Idle:
    def run(self) -> None:
        return None

    def synchronize(self) -> None:
        return None


@counts_faults
def test_a_burst_counts_the_page_faults_of_its_steps():
    # The figure responds to work: a step that touches PAGES fresh pages costs at least PAGES
    # faults, a step that touches none costs next to nothing. (A figure that read the clock,
    # or nothing, could not tell them apart.)
    touching, idle = FreshPages(), Idle()
    _, faults = Contender("pages", touching.run, touching.synchronize).burst(4)
    _, idle_faults = Contender("idle", idle.run, idle.synchronize).burst(4)
    assert PAGES <= faults < 2 * PAGES
    assert idle_faults < PAGES / 8


@pytest.mark.integration
@counts_faults
def test_a_worker_process_counts_its_own_page_faults():
    # The suite's default: each contender in a worker process, which must count the faults
    # of its own steps (not this process's).
    workers = [ProcessContender(name, cls) for name, cls in (("pages", FreshPages), ("idle", Idle))]
    try:
        (_, faults), (_, idle_faults) = (worker.ready().burst(4) for worker in workers)
    finally:
        for worker in workers:
            worker.close()
    assert PAGES <= faults < 2 * PAGES
    assert idle_faults < PAGES / 8


@pytest.mark.integration
def test_the_suite_reports_each_contenders_faults_per_step(capsys, monkeypatch):
    # A fault counter that advances by 1000 between any two reads: every burst of 4 steps
    # then counted 1000 faults, and the report must say 250 per step for every contender
    # (the per-round figures, per step, not the seconds and not another contender's).
    counter = itertools.count(step=1000)
    monkeypatch.setattr(timing, "_minor_faults", lambda: next(counter))
    flags = ["--rounds", "3", "--steps-per-round", "4", "--hidden", "8", "--batch-size", "8"]
    result = _run_json(capsys, ["step", *flags, "--isolation", "none", "--json"])
    rows = result["suites"]["step"]["contenders"]
    available = [name for name, row in rows.items() if row["available"]]
    assert {"workbench", "numpy"} <= set(available)
    assert {name: rows[name]["page_faults_per_step"] for name in available} == {
        name: 250.0 for name in available
    }


@pytest.mark.integration
def test_without_torch_the_row_says_how_to_install_it(capsys, monkeypatch):
    missing = torch_reference.TORCH_MISSING
    monkeypatch.setattr(torch_reference, "unavailable_reason", lambda device: missing)
    result = _run_json(capsys, ["step", *TINY_FLAGS, "--json"])["suites"]["step"]
    assert result["contenders"]["torch"] == {
        "label": "PyTorch (eager)",
        "available": False,
        "reason": torch_reference.TORCH_MISSING,
    }
    assert result["ratios"]["workbench_over_torch_throughput"] is None


@pytest.mark.integration
def test_the_markdown_report_has_a_table(capsys):
    assert bench_command(["step", *TINY_FLAGS, "--isolation", "none"]) == 0
    out = capsys.readouterr().out
    assert "| contender | ms/step (median) |" in out
    assert "| workbench |" in out and "| NumPy (hand-written) |" in out
    assert "workbench / NumPy step time" in out


def test_list_unknown_suite_and_bad_flags(capsys):
    assert bench_command(["--list"]) == 0
    assert "step" in capsys.readouterr().out
    assert bench_command(["nonsense"]) == 2
    assert "unknown suite 'nonsense'" in capsys.readouterr().err
    assert bench_command(["step", "--hidden", "a,b"]) == 2


@pytest.mark.skipif(gpu_count() > 0, reason="this machine has a GPU")
def test_a_gpu_run_without_a_gpu_says_what_is_missing(capsys):
    assert bench_command(["step", "--device-type", "gpu"]) == 2
    assert "no NVIDIA GPU was found" in capsys.readouterr().err


def test_interleaved_rounds_rotate_and_count():
    calls: list[str] = []
    contenders = [Contender(name, lambda name=name: calls.append(name)) for name in "abc"]
    timings = interleaved_rounds(contenders, rounds=3, steps_per_round=2, warmup_steps=1)
    assert calls[:3] == ["a", "b", "c"]  # warm-up
    assert "".join(calls[3:]) == "aabbcc" + "bbccaa" + "ccaabb"  # each leads once
    assert all(len(timing.seconds.values) == 3 for timing in timings.values())
    assert rotation(["a", "b", "c"], 4) == ["b", "c", "a"]


def test_spread_summary():
    spread = Spread((4.0, 1.0, 3.0, 2.0, 5.0))
    assert spread.summary() == {"median": 3.0, "min": 1.0, "q1": 2.0, "q3": 4.0, "max": 5.0}
    assert Spread((7.0,)).quartiles == (7.0, 7.0)
