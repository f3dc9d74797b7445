"""``%dtrain plan``'s result in a notebook: the what-if table as HTML (and its rows as dicts,
for a DataFrame or a chart), or the placed and partitioned graph drawn."""

from __future__ import annotations

from html import escape

from workbench.launch.what_if import WhatIfPlan

COLUMNS = (
    ("strategy", "strategy"),
    ("options", "options"),
    ("predicted_step_ms", "step ms"),
    ("samples_per_second", "samples/s"),
    ("bytes_per_device", "MB sent / device"),
    ("memory_per_device", "MB memory / device"),
    ("bubble", "bubble"),
    ("reason", "loses by"),
)
OPTION_KEYS = ("devices", "allreduce", "ps", "mode", "stages", "microbatches", "schedule")


class WhatIfTable:
    """The ranked predictions; ``rows`` are ``dtrain plan --what-if --json``'s
    configurations."""

    def __init__(self, plan: WhatIfPlan) -> None:
        self.source = plan.source
        self.rows = [row.to_dict() for row in plan.rows]

    def _cell(self, row: dict, key: str) -> str:
        if key == "options":
            return " ".join(f"{k}={row[k]}" for k in OPTION_KEYS if k in row)
        value = row.get(key)
        if value is None:
            return "-"
        if key in ("bytes_per_device", "memory_per_device"):
            return f"{value / 1e6:,.2f}"
        if key == "samples_per_second":
            return f"{value:,.0f}"
        if key in ("predicted_step_ms", "bubble"):
            return f"{value:.3f}" if key == "predicted_step_ms" else f"{value:.2f}"
        return str(value)

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{escape(title)}</th>" for _, title in COLUMNS)
        body = "".join(
            "<tr>"
            + "".join(f"<td>{escape(self._cell(row, key))}</td>" for key, _ in COLUMNS)
            + "</tr>"
            for row in self.rows
        )
        return (
            f"<p>what if: {escape(self.source)}</p>"
            f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
        )

    def __repr__(self) -> str:
        lines = [f"what if: {self.source}"]
        lines += ["  ".join(self._cell(row, key) for key, _ in COLUMNS) for row in self.rows]
        return "\n".join(lines)
