"""``%dtrain compare``: several strategies on the same data, model and steps, side by side.

The runs go one after another (at the same time they would share the cores and distort each
other's figures), each a :class:`BackgroundRun` in the run store. Every configuration is
checked before the first run starts. The view draws loss against steps and against wall time,
one line per strategy, and a table of what tells them apart: samples/s, bytes communicated,
busy fraction, bubble fraction, staleness.
"""

from __future__ import annotations

import html
import threading
from typing import Any

from workbench.config import RunConfig
from workbench.notebook.background_run import BackgroundRun
from workbench.training.runner import prepare_run

TABLE_COLUMNS = (
    ("strategy", "strategy"),
    ("state", "state"),
    ("steps", "steps"),
    ("samples_per_second", "samples/s"),
    ("bytes_communicated", "bytes communicated"),
    ("busy_fraction", "busy fraction"),
    ("bubble_fraction", "bubble fraction"),
    ("max_staleness", "max staleness"),
    ("final_loss", "final loss"),
    ("test_accuracy", "test accuracy"),
)


def comparison_row(run: BackgroundRun) -> dict[str, Any]:
    """What the comparison table shows for one run (None where it does not apply yet)."""
    summary = run.summary or {}
    per_device = summary.get("per_device") or []
    busy = [device["busy_fraction"] for device in per_device]
    return {
        "strategy": run.config.strategy,
        "state": run.state,
        "steps": run.step - run.first_step,
        "samples_per_second": summary.get("samples_per_second"),
        "bytes_communicated": summary.get("bytes_communicated"),
        "busy_fraction": sum(busy) / len(busy) if busy else None,
        "bubble_fraction": summary.get("bubble_fraction"),
        "max_staleness": (summary.get("staleness") or {}).get("max"),
        "final_loss": summary.get("final_loss"),
        "test_accuracy": summary.get("test_accuracy"),
    }


class Comparison:
    """Runs ``configs`` in order in a background thread; ``runs`` fills as they start."""

    def __init__(self, configs: list[RunConfig]) -> None:
        for config in configs:
            prepare_run(config)  # every error on user input before the first run starts
        self.configs = configs
        self.runs: list[BackgroundRun] = []
        self._stop = threading.Event()
        self._done = threading.Event()
        self._view = None
        self._thread = threading.Thread(target=self._run_all, name="dtrain-compare", daemon=True)
        self._thread.start()

    def _run_all(self) -> None:
        try:
            for config in self.configs:
                if self._stop.is_set():
                    return
                run = BackgroundRun(config)
                self.runs.append(run)
                if self._stop.is_set():
                    run.stop()
                try:
                    run.wait()
                except Exception:
                    continue  # recorded on the run; the next strategy still runs
        finally:
            self._done.set()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> Comparison:
        if not self._done.wait(timeout):
            raise TimeoutError(f"the comparison still runs after {timeout} s")
        return self

    def stop(self) -> None:
        """Stop the run in flight and start no more."""
        self._stop.set()
        for run in self.runs:
            run.stop()

    def rows(self) -> list[dict[str, Any]]:
        return [comparison_row(run) for run in self.runs]

    def table_html(self) -> str:
        header = "".join(f"<th>{label}</th>" for _, label in TABLE_COLUMNS)
        body = ""
        for row in self.rows():
            cells = "".join(f"<td>{_format(row[key])}</td>" for key, _ in TABLE_COLUMNS)
            body += f"<tr>{cells}</tr>"
        return f"<table><tr>{header}</tr>{body}</table>"

    def view(self):
        if self._view is None:
            from workbench.notebook.compare_view import ComparisonView

            self._view = ComparisonView(self)
        return self._view

    def _ipython_display_(self) -> None:
        from workbench.notebook.display import show

        show(self.view().widget)


def _format(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return html.escape(str(value))
