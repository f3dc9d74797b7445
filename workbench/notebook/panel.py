"""The ipywidgets face of a run: a form that starts one (:class:`TrainingForm`) and the live
panel of a running or finished one (:class:`RunPanel`: progress with steps, epoch and ETA,
status and errors with the run's faults — a failure being recovered from, restarts, dropped
pushes — a Stop button, the live charts).

The form builds the same flag words a user would type after ``%dtrain`` and starts the run
through the same function as the magic, so it rejects the same inputs with the same messages.
"""

from __future__ import annotations

import html
import threading
from typing import Any

import ipywidgets as widgets
from IPython.core.error import UsageError

from workbench.charts.live_charts import LiveCharts, LiveUpdater
from workbench.config import ConfigError, Option
from workbench.events.faults import FaultTally
from workbench.launch.background_run import BackgroundRun, register_run_viewer
from workbench.launch.flags import parse_run_flags
from workbench.notebook.display import show
from workbench.notebook.live_bokeh import live_bokeh_model
from workbench.runtime.devices import device_tag
from workbench.strategies import STRATEGIES

# The step text, bar and status line: at least 4 times a second, whatever the charts cost (they
# back off when refreshing gets costly; the progress must not).
PROGRESS_HZ = 10
# The browser redraws every chart on each refresh, on the thread that also shows the step text.
CHARTS_HZ = 4
# CSS classes of the run id, the step text and the status line (the UI tests read them).
RUN_CLASS, STEP_CLASS, STATUS_CLASS = "dtrain-panel-run", "dtrain-panel-step", "dtrain-panel-status"


def _eta(run: BackgroundRun) -> str:
    seconds = run.eta_seconds()
    return "" if seconds is None else f", ETA {seconds:.0f} s"


def step_text(run: BackgroundRun, step: int) -> str:
    """``step 120/300, epoch 3, ETA 14 s`` for ``step`` (read once per refresh, so the bar, this
    text and the status line show the same step)."""
    epochs = -(-run.total_steps // run.steps_per_epoch)
    epoch = min(step // run.steps_per_epoch + 1, epochs)
    return f"step {step}/{run.total_steps}, epoch {epoch}{_eta(run)}"


def ended_word(run: BackgroundRun, step: int) -> str | None:
    """What the run is once its devices are done: its state once it has ended, else
    ``finished`` as soon as its last step is in, ``stopped`` once the test point of a run
    stopped early is logged (right after its last step), both while the run evaluates and its
    cluster closes; None while it trains."""
    if run.done:
        return run.state
    if step >= run.total_steps:
        return "finished"
    return None if run.trained_at is None else "stopped"


def fault_note(faults: FaultTally, running: bool) -> str:
    """The status line's fault part (HTML), e.g. ``restarts 2 · dropped 14``, led while the
    run is running by the failure it has not recovered from yet and followed by the reason of
    each failure (the latest few, each on its own line, cut short); "" for a run without
    faults."""
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
    reasons = faults.failure_reasons[-REASONS_SHOWN:]
    earlier = len(faults.failure_reasons) - len(reasons)
    lines = [f"({earlier} earlier failures)"] if earlier else []
    lines += [_cut(reason, REASON_SHOWN_CHARS) for reason in reasons]
    return " · ".join(parts) + "".join(
        f"<br><span style='color:firebrick'>{html.escape(line)}</span>" for line in lines
    )


REASONS_SHOWN = 3
REASON_SHOWN_CHARS = 160


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def predicted_memory(run: BackgroundRun) -> dict[str, int]:
    """Each device's predicted peak bytes for an ended run that has a prediction (the planner
    predicts from the run's calibration when the run ends), else nothing."""
    # A panel follows any handle shaped like a run; only a trained run has a result.
    result = getattr(run, "result", None)
    prediction = result.prediction if result is not None else None
    if prediction is None:
        return {}
    return {device: memory.total for device, memory in prediction.memory_bytes.items()}


class RunPanel:
    """Progress, status, Stop and live charts of one run; ``widget`` is what is displayed.

    Two threads refresh it: ``ticker`` the step text, bar and status line (``PROGRESS_HZ``),
    ``updater`` the charts (throttled, see :class:`LiveUpdater`)."""

    def __init__(self, run: BackgroundRun) -> None:
        self.run = run
        self.charts = LiveCharts(run.log, run.config.batch_size)
        self._charts_lock = threading.Lock()
        self._faults_lock = threading.Lock()
        self.progress = widgets.IntProgress(
            value=0, min=0, max=max(1, run.total_steps - run.first_step), description="steps"
        )
        self.progress_text = widgets.Label()
        self.progress_text.add_class(STEP_CLASS)
        self.status = widgets.HTML()
        self.status.add_class(STATUS_CLASS)
        self.dashboard = widgets.HTML()
        self.stop_button = widgets.Button(description="Stop", button_style="danger", icon="stop")
        self.stop_button.on_click(lambda _: self.stop())
        self.chart_view = live_bokeh_model(self.charts.layout, self._charts_lock)
        title = widgets.HTML(f"<b>{html.escape(run.run_id)}</b>")
        title.add_class(RUN_CLASS)
        self.widget = widgets.VBox(
            [
                title,
                widgets.HBox([self.progress, self.progress_text, self.stop_button]),
                self.status,
                self.dashboard,
                self.chart_view,
            ]
        )
        self._faults = FaultTally()
        self._events_read = 0  # the panel reads the log from where it stopped, as the charts do
        self._prediction_shown = False
        self.updater = LiveUpdater(self.refresh_charts, lambda: run.done, hz=CHARTS_HZ)
        # Ends with the charts' updater too (closed by whoever closes that one).
        self.ticker = LiveUpdater(
            self.show_progress,
            lambda: run.done or self.updater.stopped(),
            hz=PROGRESS_HZ,
            busy_share=None,
            name="dtrain-panel",
        )

    def _ipython_display_(self) -> None:
        show(self.widget)

    def stop(self) -> None:
        self.run.stop()
        self.stop_button.disabled = True
        self.stop_button.description = "Stopping"

    def refresh(self) -> None:
        """Both at once: charts, then the progress and status."""
        self.refresh_charts()
        self.show_progress()

    def refresh_charts(self) -> None:
        with self._charts_lock:
            self.charts.refresh()
            if self.run.done and not self._prediction_shown:
                self._prediction_shown = True
                totals = predicted_memory(self.run)
                if totals:
                    self.charts.show_predicted_memory(totals)

    def show_progress(self) -> None:
        run = self.run
        step = run.step  # once: the bar, the text and the status show the same step
        ended = ended_word(run, step)
        self.progress.value = step - run.first_step
        self.progress_text.value = step_text(run, step)
        link = run.dashboard_link
        if ended is not None:
            self.dashboard.value = ""  # its cluster is closing or gone
        elif link and not self.dashboard.value:
            self.dashboard.value = (
                f"<a href='{html.escape(link)}' target='_blank'>Dask dashboard</a> "
                "(workbench pages: individual-workbench-loss, -utilization, -timeline, "
                "-memory)"
            )
        self.status.value = self._status_line(step, ended)
        if ended is not None:
            self.stop_button.disabled = True
            self.stop_button.description = ended
            self.stop_button.button_style = "" if ended != "failed" else "warning"

    def _status_line(self, step: int, ended: str | None) -> str:
        run = self.run
        if ended == "failed":
            line = (
                f"<span style='color:firebrick'><b>failed</b>: "
                f"{html.escape(f'{type(run.error).__name__}: {run.error}')}</span>"
            )
        elif run.done:
            summary = run.summary or {}
            line = (
                f"<b>{ended}</b>: test accuracy {summary.get('test_accuracy', 0):.4f}, "
                f"{summary.get('samples_per_second', 0):,.0f} samples/s"
            )
        elif ended is not None:  # the devices are done; the cluster closes
            result = run.test_result
            after = (
                f": test accuracy {result[1]:.4f} (closing the cluster)"
                if result is not None
                else " (evaluating, closing the cluster)"
            )
            line = f"<b>{ended}</b> at step {step}{after}"
        elif step > run.first_step:
            line = "running"  # the step is the progress text's (one count, not two)
        else:  # starting: the cluster, the data, calibration
            line = f"running: {html.escape(run.lines[-1] if run.lines else '')}"
        note = fault_note(self._read_faults(), running=ended is None)
        return f"{line} · {note}" if note else line

    def _read_faults(self) -> FaultTally:
        with self._faults_lock:  # the ticker's thread, or a refresh by hand
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
MAX_FORM_DEVICES = 16  # the device counts the form tries for a strategy's defaults


def _accepted(words: list[str]) -> bool:
    """Whether the flag parser takes these words (the check Start makes before anything
    runs; no training)."""
    try:
        parse_run_flags(words, prog="%dtrain")
    except ConfigError:
        return False
    return True


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
        # Nothing to stop until a run starts; then it follows the run panel's Stop.
        self.stop_button = widgets.Button(
            description="Stop", button_style="danger", icon="stop", disabled=True
        )
        self._follow_stop: widgets.dlink | None = None
        self.error = widgets.HTML()
        self.output = widgets.VBox()
        self.start_button.on_click(lambda _: self.start())
        self.stop_button.on_click(lambda _: self.run.stop() if self.run is not None else None)
        self.options = widgets.VBox()
        self.fields["--strategy"].observe(lambda _: self._show_options(), names="value")
        for flag, field in self.fields.items():
            if flag not in self.common:  # a strategy option can decide the devices (stages)
                field.observe(lambda _: self._fit_devices(keep=True), names="value")
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
        self._fit_devices(keep=False)

    def _fit_devices(self, keep: bool) -> None:
        """Make the device count the smallest one the chosen strategy and its options accept
        (a pipeline of 2 stages: 2 devices); with ``keep``, a count that fits is kept (an
        option changed, not the strategy)."""
        devices = self.fields["--devices"]
        if keep and _accepted(self.flags()):
            return
        for count in range(1, MAX_FORM_DEVICES + 1):
            if _accepted(self._with_devices(count)):
                devices.value = str(count)
                return
        # None fits: another field is wrong, and Start will say which.

    def _with_devices(self, count: int) -> list[str]:
        words = self.flags()
        at = words.index("--devices") + 1 if "--devices" in words else None
        if at is None:
            return [*words, "--devices", str(count)]
        return [*words[:at], str(count), *words[at + 1 :]]

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
        panel = run.panel()
        self.output.children = [panel.widget]
        if self._follow_stop is not None:
            self._follow_stop.unlink()
        # Usable while the run's own Stop is (disabled once it ends).
        self._follow_stop = widgets.dlink(
            (panel.stop_button, "disabled"), (self.stop_button, "disabled")
        )
        return run


def form_start(magics: Any):
    """The start function a form shares with the magic of ``magics``."""
    return lambda flags: magics.start(flags, None, None)


register_run_viewer(RunPanel)  # a background run's panel is this one
