"""``%dtrain compare``: several strategies, or settings, on the same data, model and steps,
side by side.

The runs go one after another (at the same time they would share the cores and distort each
other's figures), each a :class:`BackgroundRun` in the run store. Every configuration is
checked before the first run starts. The view shows a table of what tells them apart first
(samples/s, bytes communicated, busy fraction, bubble fraction, staleness and, when a run
compresses its gradients, the compression figures), then loss against steps and against the
time since each run's first step, one line per run (:mod:`workbench.notebook.compare_view`).

Besides the strategies (the first argument, comma-separated), the values of a comparable flag
may be listed with commas: ``%dtrain compare mirrored --devices 2 --compression
none,fp16,topk:0.01`` runs mirrored three times (:func:`comparison_flag_sets`).
"""

from __future__ import annotations

import html
import threading
from collections.abc import Callable
from typing import Any

from workbench.config import RunConfig
from workbench.launch.background_run import BackgroundRun
from workbench.launch.runner import prepare_run

# Flags whose comma-separated values are compared like the strategies are.
COMPARABLE_FLAGS = ("--compression",)

TABLE_COLUMNS = (
    ("strategy", "strategy"),
    ("compression", "compression"),
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
# Shown when some run of the comparison compresses its gradients.
COMPRESSION_COLUMNS = (
    ("gradient_bytes", "gradient bytes"),
    ("compressed_bytes", "compressed bytes"),
    ("compression_ratio", "ratio"),
    ("skipped_steps", "skipped steps"),
)


def comparison_flag_sets(strategies: list[str], flags: list[str]) -> list[list[str]]:
    """One flag list per run: each strategy with each combination of the comma-separated
    values of :data:`COMPARABLE_FLAGS` (strategies outermost, values in the order given).

    Examples
    --------
    >>> comparison_flag_sets(["mirrored"], ["--devices", "2", "--compression", "none,fp16"])
    [['--strategy', 'mirrored', '--devices', '2', '--compression', 'none'], \
['--strategy', 'mirrored', '--devices', '2', '--compression', 'fp16']]
    """
    variants: list[list[str]] = [[]]
    words, index = list(flags), 0
    while index < len(words):
        flag, _, attached = words[index].partition("=")
        if flag in COMPARABLE_FLAGS and (attached or index + 1 < len(words)):
            text = attached or words[index + 1]
            values = [value for value in text.split(",") if value] or [text]
            variants = [[*variant, flag, value] for variant in variants for value in values]
            index += 1 if attached else 2
            continue
        variants = [[*variant, words[index]] for variant in variants]
        index += 1
    return [["--strategy", strategy, *variant] for strategy in strategies for variant in variants]


def comparison_row(run: BackgroundRun) -> dict[str, Any]:
    """What the comparison table shows for one run (None where it does not apply yet)."""
    return _row(
        run.config.strategy,
        run.config.options.get("compression"),
        run.state,
        run.step - run.first_step,
        run.summary,
    )


def _row(
    strategy: str, compression: str | None, state: str, steps: int, summary: dict | None
) -> dict[str, Any]:
    summary = summary or {}
    per_device = summary.get("per_device") or []
    busy = [device["busy_fraction"] for device in per_device]
    compressed = summary.get("compression") or {}
    return {
        "strategy": strategy,
        "compression": compression,
        "state": state,
        "steps": steps,
        "samples_per_second": summary.get("samples_per_second"),
        "bytes_communicated": summary.get("bytes_communicated"),
        "busy_fraction": sum(busy) / len(busy) if busy else None,
        "bubble_fraction": summary.get("bubble_fraction"),
        "max_staleness": (summary.get("staleness") or {}).get("max"),
        "final_loss": summary.get("final_loss"),
        "test_accuracy": summary.get("test_accuracy"),
        "gradient_bytes": compressed.get("gradient_bytes"),
        "compressed_bytes": compressed.get("compressed_bytes"),
        "compression_ratio": compressed.get("ratio"),
        "skipped_steps": compressed.get("skipped_steps"),
    }


class _TableMixin:
    rows: Callable[[], list[dict[str, Any]]]  # each class of the table has its own

    def columns(self) -> tuple[tuple[str, str], ...]:
        """The table's (key, label) columns; the compression ones only when some run of the
        comparison compresses its gradients."""
        rows = self.rows()
        if any(row["compression"] not in (None, "none") for row in rows):
            return TABLE_COLUMNS + COMPRESSION_COLUMNS
        return tuple(column for column in TABLE_COLUMNS if column[0] != "compression")

    def table_html(self) -> str:
        columns = self.columns()
        header = "".join(f"<th>{label}</th>" for _, label in columns)
        body = ""
        for row in self.rows():
            cells = "".join(f"<td>{_format(row[key])}</td>" for key, _ in columns)
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
        config = stored.config()
        self.config = RunConfig(strategy=config["strategy"])
        self.log = stored.event_log()
        status = stored.status()
        self.total_steps = status.get("steps") or status["step"]
        self.row = _row(
            self.config.strategy,
            config.get("compression"),
            status["state"],
            status["step"],
            stored.summary(),
        )


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
