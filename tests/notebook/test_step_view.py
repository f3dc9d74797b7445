"""A run's step as predicted beside the same step as measured: every device has both rows, and
both show the strategy's phases (compute, the all-reduce, the update)."""

from __future__ import annotations

import pytest

from workbench.charts.step_comparison import ROW_PX
from workbench.config import RunConfig
from workbench.launch.runner import run_training
from workbench.notebook import compare_step
from workbench.notebook.step_view import NoPrediction, measured_rows
from workbench.runtime.devices import device_tag

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def mirrored_run(tmp_path_factory):
    store = tmp_path_factory.mktemp("runs")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("DTRAIN_RUN_STORE", str(store))
        yield run_training(
            RunConfig(strategy="mirrored", devices=2, steps=30, hidden=(32,)),
            progress=lambda _: None,
        )


def rows_of(chart) -> list[tuple[tuple[str, str], str]]:
    data = chart.renderers[0].data_source.data
    return list(zip(data["y"], data["phase"]))


def test_each_device_has_its_predicted_row_above_its_measured_row(mirrored_run):
    chart = compare_step(mirrored_run)
    devices = [device_tag(entry["device"]) for entry in mirrored_run.summary["per_device"]]
    factors = list(reversed(chart.y_range.factors))  # drawn top to bottom
    assert factors == [(d, source) for d in devices for source in ("predicted", "measured")]
    drawn = rows_of(chart)
    for device in devices:
        for source in ("predicted", "measured"):
            phases = {phase for (row, phase) in drawn if row == (device, source)}
            assert {"compute", "allreduce", "update"} <= phases, (device, source, phases)
    assert "predicted" in chart.title.text


def test_device_names_are_short_and_stand_level_beside_their_rows(mirrored_run):
    chart = compare_step(mirrored_run)
    devices = {device for device, _ in chart.y_range.factors}
    assert devices == {"task0-cpu0", "task1-cpu0"}
    (axis,) = chart.yaxis
    assert axis.group_label_orientation == "horizontal"  # not along the axis, into each other
    assert chart.height >= ROW_PX * len(chart.y_range.factors)


def test_the_title_gives_both_step_times_and_the_step_number_apart(mirrored_run):
    chart = compare_step(mirrored_run)
    step, rows = measured_rows(mirrored_run.log)
    measured_ms = max(row["end"] for row in rows) * 1e3
    predicted_ms = mirrored_run.prediction.step_seconds * 1e3
    assert chart.title.text == (
        f"mirrored: one step predicted {predicted_ms:.2f} ms, measured {measured_ms:.2f} ms "
        f"(step {step})"
    )
    assert "measured step" not in chart.title.text


def test_the_measured_step_is_a_steady_one_and_starts_at_zero(mirrored_run):
    step, rows = measured_rows(mirrored_run.log)
    assert step >= 15  # from the second half: past the warm-up
    assert min(row["start"] for row in rows) == 0.0
    assert all(row["end"] >= row["start"] for row in rows)
    with pytest.raises(ValueError, match="step 999"):
        measured_rows(mirrored_run.log, 999)


def test_a_run_without_a_prediction_says_why(tmp_path, monkeypatch):
    monkeypatch.setenv("DTRAIN_RUN_STORE", str(tmp_path))
    uncalibrated = run_training(
        RunConfig(steps=3, hidden=(8,), no_calibrate=True), progress=lambda _: None
    )
    with pytest.raises(NoPrediction, match="--no-calibrate"):
        compare_step(uncalibrated)
