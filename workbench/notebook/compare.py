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
from workbench.launch.background_run import BackgroundRun
from workbench.launch.runner import prepare_run

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
    return _row(run.config.strategy, run.state, run.step - run.first_step, run.summary)


def _row(strategy: str, state: str, steps: int, summary: dict | None) -> dict[str, Any]:
    summary = summary or {}
    per_device = summary.get("per_device") or []
    busy = [device["busy_fraction"] for device in per_device]
    return {
        "strategy": strategy,
        "state": state,
        "steps": steps,
        "samples_per_second": summary.get("samples_per_second"),
        "bytes_communicated": summary.get("bytes_communicated"),
        "busy_fraction": sum(busy) / len(busy) if busy else None,
        "bubble_fraction": summary.get("bubble_fraction"),
        "max_staleness": (summary.get("staleness") or {}).get("max"),
        "final_loss": summary.get("final_loss"),
        "test_accuracy": summary.get("test_accuracy"),
    }


class _TableMixin:
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


class Comparison(_TableMixin):
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


class _StoredRun:
    """A finished run read back from the store, shaped as the comparison view reads runs."""

    def __init__(self, stored) -> None:
        self.config = RunConfig(strategy=stored.config()["strategy"])
        self.log = stored.event_log()
        status = stored.status()
        self.row = _row(self.config.strategy, status["state"], status["step"], stored.summary())


class StoredComparison(_TableMixin):
    """Runs already in the store (from this kernel or another), side by side like
    ``%dtrain compare`` shows the runs it starts.

    ``compare_stored(["20261122-...-mirrored-3a022b", ...])`` (ids or unique prefixes)."""

    done = True

    def __init__(self, run_ids: list[str], store=None) -> None:
        from workbench.store import RunStore

        store = store or RunStore()
        self.runs = [_StoredRun(store.open(_resolve(store, run_id))) for run_id in run_ids]
        self.configs = [run.config for run in self.runs]
        self._view = None

    def rows(self) -> list[dict[str, Any]]:
        return [run.row for run in self.runs]


def _resolve(store, prefix: str) -> str:
    matches = [run.run_id for run in store.runs() if run.run_id.startswith(prefix)]
    if len(matches) != 1:
        what = "matches no stored run" if not matches else f"matches {len(matches)} stored runs"
        raise KeyError(f"run id {prefix!r} {what} (store: {store.root})")
    return matches[0]


compare_stored = StoredComparison


def _format(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return html.escape(str(value))
