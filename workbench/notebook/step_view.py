"""A run's step as the planner predicted it beside the same step as the run recorded it.

``compare_step(run)`` takes a finished run (a ``%dtrain`` handle or a
:class:`~workbench.launch.runner.RunResult`) and draws, device by device, the prediction's
simulated timeline (made from the run's own calibration before its first step) above a
steady-state step of the run: the step whose length is the median of the second half's, or the
``step`` asked for. Where the rows part, the prediction shows what it assumed.
"""

from __future__ import annotations

from statistics import median_low
from typing import Any

from workbench.charts.step_comparison import step_comparison
from workbench.launch.runner import RunResult


class NoPrediction(ValueError):
    """The run has no prediction to compare (no calibration, or a strategy not predicted)."""


def predicted_rows(prediction) -> list[dict]:
    """The simulated intervals as chart rows (one per action that took time)."""
    return [
        {
            "device": interval.device,
            "source": "predicted",
            "phase": interval.phase,
            "start": interval.start,
            "end": interval.end,
        }
        for interval in prediction.timeline.intervals
        if interval.end > interval.start
    ]


def measured_rows(log, step: int | None = None) -> tuple[int, list[dict]]:
    """(the step, its recorded phases as chart rows from the step's first start)."""
    spans: dict[int, list[float]] = {}
    for event in log.phases():
        span = spans.setdefault(event.step, [event.start, event.end])
        span[0], span[1] = min(span[0], event.start), max(span[1], event.end)
    if not spans:
        raise NoPrediction("the run recorded no phases")
    if step is None:
        later = sorted(spans)[len(spans) // 2 :]
        lengths = {s: spans[s][1] - spans[s][0] for s in later}
        typical = median_low(lengths.values())
        step = next(s for s in later if lengths[s] == typical)
    elif step not in spans:
        raise ValueError(f"step {step} is not among the run's recorded steps")
    began = spans[step][0]
    rows = [
        {
            "device": event.device,
            "source": "measured",
            "phase": event.phase,
            "start": event.start - began,
            "end": event.end - began,
        }
        for event in log.phases()
        if event.step == step
    ]
    return step, rows


def compare_step(run: Any, step: int | None = None):
    """The Bokeh figure: each device's predicted step above its measured ``step``."""
    result: RunResult | None = getattr(run, "result", run)
    if not isinstance(result, RunResult):
        raise NoPrediction("the run has not finished (wait for it: run.wait())")
    if result.prediction is None:
        raise NoPrediction(
            "the run has no prediction: it ran with --no-calibrate and nothing cached, or "
            "its strategy is not predicted (its progress lines say which)"
        )
    chosen, measured = measured_rows(result.log, step)
    predicted = predicted_rows(result.prediction)
    title = (
        f"{result.summary['strategy']}: predicted step "
        f"{result.prediction.step_seconds * 1e3:.2f} ms, measured step {chosen}"
    )
    return step_comparison(predicted + measured, title, result.prediction.devices)
