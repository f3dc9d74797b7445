"""The calibration suite runs first runs with and without calibrating and reports what the
calibration took by its own timer and what it added to the runs' wall time."""

import contextlib
import io
import json

import pytest

from benchmarks import calibration_suite
from benchmarks.command import bench_command

pytestmark = pytest.mark.integration


def test_calibrating_runs_report_their_measuring_and_the_others_none():
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert bench_command(["calibration", "--repeats", "1", "--json"]) == 0
    result = json.loads(buffer.getvalue())["suites"]["calibration"]
    calibrated, uncalibrated = result["calibrated_wall_s"], result["uncalibrated_wall_s"]
    assert 0 < result["measuring_s"]["median"] < calibrated["median"]
    assert result["own_share"] == pytest.approx(
        result["measuring_s"]["median"] / calibrated["median"]
    )
    assert result["added_share"] == pytest.approx(
        (calibrated["median"] - uncalibrated["median"]) / uncalibrated["median"]
    )
    assert result["met"] == (result["own_share"] < calibration_suite.SHARE)
    assert "calibration's own timer" in calibration_suite.render(result)
