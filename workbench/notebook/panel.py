"""The ipywidgets face of a run: a form that starts one (:class:`TrainingForm`) and the live
panel of a running or finished one (:class:`RunPanel`: progress with steps, epoch and ETA,
status and errors, a Stop button, the live charts).

The form builds the same flag words a user would type after ``%dtrain`` and starts the run
through the same function as the magic, so it rejects the same inputs with the same messages.
"""

from __future__ import annotations

import html
import time
from typing import Any

import ipywidgets as widgets
from IPython.core.error import UsageError

from workbench.notebook.background_run import BackgroundRun
from workbench.notebook.charts import LiveCharts, LiveUpdater


def _eta(run: BackgroundRun) -> str:
    done = run.step - run.first_step
    left = run.total_steps - run.step
    if done <= 0 or run.done:
        return ""
    seconds = (time.time() - run.started) / done * left
    return f", ETA {seconds:.0f} s"


class RunPanel:
    """Progress, status, Stop and live charts of one run; ``widget`` is what is displayed."""

    def __init__(self, run: BackgroundRun) -> None:
        from jupyter_bokeh.widgets import BokehModel

        self.run = run
        self.charts = LiveCharts(run.log, run.config.batch_size)
        self.progress = widgets.IntProgress(
            value=0, min=0, max=max(1, run.total_steps - run.first_step), description="steps"
        )
        self.progress_text = widgets.Label()
        self.status = widgets.HTML()
        self.dashboard = widgets.HTML()
        self.stop_button = widgets.Button(description="Stop", button_style="danger", icon="stop")
        self.stop_button.on_click(lambda _: self.stop())
        self.widget = widgets.VBox(
            [
                widgets.HTML(f"<b>{html.escape(run.run_id)}</b>"),
                widgets.HBox([self.progress, self.progress_text, self.stop_button]),
                self.status,
                self.dashboard,
                BokehModel(self.charts.layout),
            ]
        )
        self.updater = LiveUpdater(self.refresh, lambda: run.done)

    def stop(self) -> None:
        self.run.stop()
        self.stop_button.disabled = True
        self.stop_button.description = "Stopping"

    def refresh(self) -> None:
        run = self.run
        self.charts.refresh()
        self.progress.value = run.step - run.first_step
        epoch = min(run.step // run.steps_per_epoch + 1, -(-run.total_steps // run.steps_per_epoch))
        self.progress_text.value = f"step {run.step}/{run.total_steps}, epoch {epoch}{_eta(run)}"
        link = run.job.dashboard_link
        if link and not self.dashboard.value:
            self.dashboard.value = (
                f"<a href='{html.escape(link)}' target='_blank'>Dask dashboard</a> "
                "(workbench pages: individual-workbench-loss, -utilization, -timeline)"
            )
        if run.state == "failed":
            self.status.value = (
                f"<span style='color:firebrick'><b>failed</b>: "
                f"{html.escape(f'{type(run.error).__name__}: {run.error}')}</span>"
            )
        elif run.done:
            summary = run.summary or {}
            self.status.value = (
                f"<b>{run.state}</b>: test accuracy {summary.get('test_accuracy', 0):.4f}, "
                f"{summary.get('samples_per_second', 0):,.0f} samples/s"
            )
        else:
            self.status.value = f"running: {html.escape(run.lines[-1] if run.lines else '')}"
        if run.done:
            self.stop_button.disabled = True
            self.stop_button.description = run.state
            self.stop_button.button_style = "" if run.state != "failed" else "warning"


# The form -------------------------------------------------------------------------------

STRATEGY_OPTIONS = {
    # strategy -> the option widgets that apply to it (by flag)
    "one-device": (),
    "mirrored": ("--allreduce", "--bucket-mb", "--compression"),
    "central-storage": (),
    "multi-worker-mirrored": ("--hosts", "--bucket-mb", "--compression"),
    "parameter-server": ("--ps", "--mode", "--staleness", "--replication"),
    "model-parallel": (),
    "pipeline": ("--stages", "--microbatches", "--schedule"),
    "hybrid": ("--stages", "--microbatches", "--schedule"),
}


COMMON_FLAGS = ("--strategy", "--devices", "--dataset", "--epochs", "--batch-size", "--lr")
_LABEL_STYLE = {"description_width": "110px"}


def _text(value: str, label: str, placeholder: str = "") -> widgets.Text:
    # Text, not numeric widgets: the flag parser converts and checks, as for %dtrain.
    return widgets.Text(value, description=label, placeholder=placeholder, style=_LABEL_STYLE)


def _choice(options, label: str) -> widgets.Dropdown:
    return widgets.Dropdown(options=options, description=label, style=_LABEL_STYLE)


class TrainingForm:
    """Start runs from widgets. ``start(flags)`` is the magic's own start function."""

    def __init__(self, start) -> None:
        from workbench.config import (
            ALLREDUCE_NAMES,
            MODE_NAMES,
            REPLICATION_NAMES,
            SCHEDULE_NAMES,
        )
        from workbench.parallel.registry import STRATEGY_NAMES

        self._start = start
        self.run: BackgroundRun | None = None
        self.fields: dict[str, widgets.Widget] = {
            "--strategy": _choice(STRATEGY_NAMES, "strategy"),
            "--devices": _text("1", "devices"),
            "--dataset": _text("digits", "data set"),
            "--epochs": _text("10", "epochs"),
            "--batch-size": _text("32", "batch size"),
            "--lr": _text("", "learning rate", "optimizer's"),
            "--allreduce": _choice(ALLREDUCE_NAMES, "all-reduce"),
            "--bucket-mb": _text("25", "bucket MiB"),
            "--compression": _choice(("none", "float16"), "compression"),
            "--hosts": _text("2", "hosts"),
            "--ps": _text("1", "PS shards"),
            "--mode": _choice(MODE_NAMES, "mode"),
            "--staleness": _text("", "staleness", "unbounded"),
            "--replication": _choice(REPLICATION_NAMES, "replication"),
            "--stages": _text("2", "stages"),
            "--microbatches": _text("4", "micro-batches"),
            "--schedule": _choice(SCHEDULE_NAMES, "schedule"),
        }
        self.start_button = widgets.Button(description="Start", button_style="success", icon="play")
        self.stop_button = widgets.Button(description="Stop", button_style="danger", icon="stop")
        self.error = widgets.HTML()
        self.output = widgets.VBox()
        self.start_button.on_click(lambda _: self.start())
        self.stop_button.on_click(lambda _: self.run.stop() if self.run is not None else None)
        self.options = widgets.VBox()
        self.fields["--strategy"].observe(lambda _: self._show_options(), names="value")
        self.widget = widgets.VBox(
            [
                widgets.HBox([widgets.VBox([self.fields[f] for f in COMMON_FLAGS]), self.options]),
                widgets.HBox([self.start_button, self.stop_button]),
                self.error,
                self.output,
            ]
        )
        self._show_options()

    def _show_options(self) -> None:
        chosen = STRATEGY_OPTIONS.get(self.fields["--strategy"].value, ())
        self.options.children = [self.fields[flag] for flag in chosen]

    def flags(self) -> list[str]:
        """The ``%dtrain`` words the widgets stand for (empty text fields are left out)."""
        chosen = STRATEGY_OPTIONS.get(self.fields["--strategy"].value, ())
        words: list[str] = []
        for flag, field in self.fields.items():
            if flag not in COMMON_FLAGS and flag not in chosen:
                continue
            value = str(field.value).strip()
            if value:
                words += [flag, value]
        return words

    def start(self) -> BackgroundRun | None:
        """Start a run from the widgets; a rejected input shows the magic's message."""
        try:
            run = self._start(self.flags())
        except UsageError as error:
            self.error.value = f"<span style='color:firebrick'>{html.escape(str(error))}</span>"
            return None
        self.error.value = ""
        self.run = run
        self.output.children = [run.panel().widget]
        return run


def form_start(magics: Any):
    """The start function a form shares with the magic of ``magics``."""
    return lambda flags: magics.start(flags, None, None)
