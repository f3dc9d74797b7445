"""A run's step as the planner predicted it beside the same step as the run recorded it.

``compare_step(run)`` takes a finished run (a ``%dtrain`` handle or a
:class:`~workbench.launch.runner.RunResult`) and draws, device by device, the prediction's
simulated timeline (made from the run's own calibration before its first step) above a
steady-state step of the run: the step whose length is the median of the second half's, or the
``step`` asked for. Where the rows part, the prediction shows what it assumed. Devices go by
their short names (``task0-cpu0``, :func:`~workbench.runtime.devices.device_tag`); the title
gives both step times, e.g. ``mirrored: one step predicted 2.50 ms, measured 2.46 ms (step
29)``.
"""

from __future__ import annotations

from statistics import median_low
from typing import Any

from workbench.charts.step_comparison import step_comparison
from workbench.launch.runner import RunResult
from workbench.runtime.devices import device_tag


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
            "action": interval.label,  # a pipeline compute's schedule action (F3, I3@1)
        }
        for interval in prediction.timeline.intervals
        if interval.end > interval.start
    ]


def short_device(name: str) -> str:
    """A device name as the charts' device axes show it (``task1-cpu0``); a name that names
    no task is kept as it is.

    Examples
    --------
    >>> short_device("/job:worker/task:1/device:CPU:0"), short_device("host")
    ('task1-cpu0', 'host')
    """
    return device_tag(name) if "task:" in name else name


def step_title(strategy: str, predicted_seconds: float, measured_seconds: float, step: int) -> str:
    """The chart's title: both step times, with the measured step's number apart from them.

    Examples
    --------
    >>> step_title("mirrored", 0.0025, 0.00246, 29)
    'mirrored: one step predicted 2.50 ms, measured 2.46 ms (step 29)'
    """
    return (
        f"{strategy}: one step predicted {predicted_seconds * 1e3:.2f} ms, "
        f"measured {measured_seconds * 1e3:.2f} ms (step {step})"
    )


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
            "action": event.action,
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
    title = step_title(
        result.summary["strategy"],
        result.prediction.step_seconds,
        max(row["end"] for row in measured),
        chosen,
    )
    rows = [{**row, "device": short_device(row["device"])} for row in predicted + measured]
    devices = [short_device(device) for device in result.prediction.devices]
    return step_comparison(rows, title, devices)
