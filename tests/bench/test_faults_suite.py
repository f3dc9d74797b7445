"""The faults suite runs end to end with tiny settings on real local clusters (one worker really
SIGKILLed) and reports its documented keys with figures that hold together; the killed run's
final parameters equal the uninterrupted run's bit for bit.

No timing thresholds: a test machine's speed proves nothing about the code. The clusters the
suite starts must leave no process or shared-memory segment behind (the cluster tests'
``no_leftover_processes`` check).
"""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from benchmarks import bench_command, faults_suite
from tests.parallel.conftest import no_leftover_processes  # noqa: F401 (a fixture)

SPREAD_KEYS = {"median", "min", "q1", "q3", "max"}
STEPS = (100, 6, 30)  # recovery, backup-worker and async runs
FLAGS = ["faults", "--hidden", "16", "--fault-steps", ",".join(map(str, STEPS)), "--repeats", "1"]


def _positive_spread(figures: dict) -> None:
    assert set(figures) == SPREAD_KEYS
    assert figures["min"] > 0 and figures["median"] > 0


@pytest.mark.integration
@pytest.mark.usefixtures("no_leftover_processes")
def test_faults_suite_measures_recovery_backups_and_an_async_straggler():
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert bench_command([*FLAGS, "--json"]) == 0
    result = json.loads(buffer.getvalue())["suites"]["faults"]
    assert set(result) == {"suite", "settings", "recovery", "backup", "async"}
    settings = result["settings"]
    assert settings["hidden"] == [16] and settings["repeats"] == 1
    assert settings["kill_at"] == STEPS[0] // 2 and settings["factor"] == 3.0

    recovery = result["recovery"]
    assert recovery["bit_identical"] is True and recovery["bit_identical_per_repeat"] == [True]
    for key in (
        "recovery_seconds",
        "detect_seconds",
        "kill_to_resume_seconds",
        "clean_wall_seconds",
        "killed_wall_seconds",
    ):
        _positive_spread(recovery[key])
    (killed,) = recovery["runs"]["killed"]
    assert killed["restarts"] == 1 and killed["killed_pid"] > 0
    assert killed["kill_delay_seconds"] >= 0 and "restoring every device" in killed["failure"]
    # Kill -> resumed is the time to notice the failure plus the engine's recovery time (which
    # the run's summary rounds to milliseconds).
    assert killed["kill_to_resume_seconds"] == pytest.approx(
        killed["detect_seconds"] + killed["recovery_seconds"], abs=1e-3
    )
    # The run was restored from a checkpoint at or before the step that failed, after the kill.
    assert killed["restored_from_step"] % settings["checkpoint_every"] == 0
    assert recovery["kill_at"] <= killed["failed_at_step"]
    assert killed["restored_from_step"] <= killed["failed_at_step"]
    assert recovery["steps_recomputed"] == [killed["steps_recomputed"]]

    backup = result["backup"]
    assert backup["workers"] == 3 and backup["backups"] == 1
    without, with_backup = backup["rows"]
    assert (without["backup_workers"], with_backup["backup_workers"]) == (0, 1)
    for row, share in ((without, 1.0), (with_backup, 2 / 3)):
        _positive_spread(row["samples_per_second"])
        (run,) = row["runs"]
        assert 0 <= run["test_accuracy"] <= 1
        # Applied samples/s: the (N-B)/N of the global batch whose gradients were used.
        assert run["applied_samples_per_second"] == pytest.approx(share * run["samples_per_second"])
    # Without backups every step applies every worker's gradient; with one, the first N-B = 2
    # of each step's (the straggler's are mostly the late ones, dropped).
    assert without["runs"][0]["updates"] == [STEPS[1]] * 3
    assert without["runs"][0]["dropped_gradients"] == 0
    assert sum(with_backup["runs"][0]["updates"]) == 2 * STEPS[1]
    assert with_backup["runs"][0]["dropped_gradients"] > 0
    ratio = backup["samples_per_second_ratio"]["median"]
    assert ratio > 0 and ratio == pytest.approx(
        with_backup["runs"][0]["samples_per_second"] / without["runs"][0]["samples_per_second"]
    )
    assert backup["applied_samples_per_second_ratio"]["median"] == pytest.approx(ratio * 2 / 3)

    asynchronous = result["async"]
    assert asynchronous["workers"] == 2 and asynchronous["straggler_task"] == 1
    for updates in asynchronous["updates"]:
        _positive_spread(updates)
    # The run's budget: one update per worker and step, however the workers shared it.
    assert sum(asynchronous["runs"][0]["updates"]) == 2 * STEPS[2]
    _positive_spread(asynchronous["fast_over_slow_updates"])
    _positive_spread(asynchronous["samples_per_second"])

    report = faults_suite.render(result)
    assert "| recovery_seconds (failure noticed -> first step after the restore) |" in report
    assert "bit for bit: **yes**" in report
    assert "| backup workers | samples/s (median) |" in report
    assert "| task:1 (straggler) |" in report


def test_the_faults_flags_are_checked_before_any_cluster_starts():
    assert bench_command(["faults", "--fault-steps", "100,20"]) == 2
    assert bench_command(["faults", "--checkpoint-every", "0"]) == 2
    # A kill at or after the recovery run's last step would never happen.
    assert bench_command(["faults", "--fault-steps", "40,5,5", "--kill-at", "40"]) == 2
