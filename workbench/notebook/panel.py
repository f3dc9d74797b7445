"""The ipywidgets face of a run: a form that starts one (:class:`TrainingForm`) and the live
panel of a running or finished one (:class:`RunPanel`: progress with steps, epoch and ETA,
status and errors with the run's faults — a failure being recovered from, restarts, dropped
pushes — a Stop button, the live charts).

The form builds the same flag words a user would type after ``%dtrain`` and starts the run
through the same function as the magic, so it rejects the same inputs with the same messages.
"""

from __future__ import annotations

import html
import time
from typing import Any

import ipywidgets as widgets
from IPython.core.error import UsageError

from workbench.charts.live_charts import LiveCharts, LiveUpdater
from workbench.config import Option
from workbench.events.faults import FaultTally
from workbench.launch.background_run import BackgroundRun, register_run_viewer
from workbench.notebook.display import show
from workbench.runtime.devices import device_tag
from workbench.strategies import STRATEGIES


def _eta(run: BackgroundRun) -> str:
    done = run.step - run.first_step
    left = run.total_steps - run.step
    if done <= 0 or run.done:
        return ""
    seconds = (time.time() - run.started) / done * left
    return f", ETA {seconds:.0f} s"


def fault_note(faults: FaultTally, running: bool) -> str:
    """The status line's fault part (HTML), e.g. ``restarts 2 · dropped 14``, led while the
    run is running by the failure it has not recovered from yet; "" for a run without faults."""
    parts = []
    failure = faults.pending_failure
    if running and failure is not None:
        # A failure no device could be blamed for is the run's ("cluster"), not a device's.
        named = "/task:" in failure.device
        where = html.escape(device_tag(failure.device) if named else failure.device)
        parts.append(
            f"<span style='color:firebrick'>failure noticed on {where} "
            f"at step {failure.step}</span>"
        )
    if faults.line():
        parts.append(html.escape(faults.line()))
    return " · ".join(parts)


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
        self._faults = FaultTally()
        self._events_read = 0  # the panel reads the log from where it stopped, as the charts do
        self.updater = LiveUpdater(self.refresh, lambda: run.done)

    def _ipython_display_(self) -> None:
        show(self.widget)

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
        self.status.value = self._status_line()
        if run.done:
            self.stop_button.disabled = True
            self.stop_button.description = run.state
            self.stop_button.button_style = "" if run.state != "failed" else "warning"

    def _status_line(self) -> str:
        run = self.run
        if run.state == "failed":
            line = (
                f"<span style='color:firebrick'><b>failed</b>: "
                f"{html.escape(f'{type(run.error).__name__}: {run.error}')}</span>"
            )
        elif run.done:
            summary = run.summary or {}
            line = (
                f"<b>{run.state}</b>: test accuracy {summary.get('test_accuracy', 0):.4f}, "
                f"{summary.get('samples_per_second', 0):,.0f} samples/s"
            )
        else:
            line = f"running: {html.escape(run.lines[-1] if run.lines else '')}"
        note = fault_note(self._read_faults(), running=not run.done)
        return f"{line} · {note}" if note else line

    def _read_faults(self) -> FaultTally:
        new = self.run.log.since(self._events_read)
        self._events_read += len(new)
        for event in new:
            self._faults.add(event)
        return self._faults


# The form -------------------------------------------------------------------------------

# The run options the form shows for every strategy; each strategy's own options come from
# its definition (``workbench.strategies``), so a new strategy gets its widgets by itself.
COMMON_FIELDS = (
    ("--devices", "devices", "1", ""),
    ("--dataset", "data set", "digits", ""),
    ("--epochs", "epochs", "10", ""),
    ("--batch-size", "batch size", "32", ""),
    ("--lr", "learning rate", "", "optimizer's"),
)
_LABEL_STYLE = {"description_width": "110px"}


def _text(value: str, label: str, placeholder: str = "") -> widgets.Text:
    # Text, not numeric widgets: the flag parser converts and checks, as for %dtrain.
    return widgets.Text(value, description=label, placeholder=placeholder, style=_LABEL_STYLE)


def _choice(options, label: str) -> widgets.Dropdown:
    return widgets.Dropdown(options=options, description=label, style=_LABEL_STYLE)


def option_widget(option: Option) -> widgets.Widget:
    """The widget of a strategy option: a switch, its values in a menu, or its default as
    text."""
    if option.type is bool:
        widget = widgets.Checkbox(value=bool(option.default), description=option.form_label)
    elif option.choices is not None:
        widget = _choice(option.choices, option.form_label)
        widget.value = option.default
    else:
        shown = "" if option.default is None else str(option.default)
        widget = _text(shown, option.form_label, "unbounded" if option.optional else "")
    widget.tooltip = option.describe()
    return widget


class TrainingForm:
    """Start runs from widgets. ``start(flags)`` is the magic's own start function."""

    def __init__(self, start) -> None:
        self._start = start
        self.run: BackgroundRun | None = None
        self.fields: dict[str, widgets.Widget] = {
            "--strategy": _choice(STRATEGIES.names(), "strategy")
        }
        for flag, label, value, placeholder in COMMON_FIELDS:
            self.fields[flag] = _text(value, label, placeholder)
        self.common = tuple(self.fields)
        for option in STRATEGIES.options().values():
            self.fields[option.flag] = option_widget(option)
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
                widgets.HBox([widgets.VBox([self.fields[f] for f in self.common]), self.options]),
                widgets.HBox([self.start_button, self.stop_button]),
                self.error,
                self.output,
            ]
        )
        self._show_options()

    def _chosen(self) -> tuple[str, ...]:
        """The flags of the chosen strategy's options."""
        definition = STRATEGIES[self.fields["--strategy"].value]
        return tuple(option.flag for option in definition.options)

    def _show_options(self) -> None:
        self.options.children = [self.fields[flag] for flag in self._chosen()]

    def flags(self) -> list[str]:
        """The ``%dtrain`` words the widgets stand for (empty text fields are left out)."""
        chosen = self._chosen()
        words: list[str] = []
        for flag, field in self.fields.items():
            if flag not in self.common and flag not in chosen:
                continue
            if isinstance(field, widgets.Checkbox):
                words += [flag] if field.value else []
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


register_run_viewer(RunPanel)  # a background run's panel is this one
