"""The compression suite runs end to end with a tiny configuration (one epoch of a small MLP)
and reports, for every value, figures that hold together: ``none`` sends what it counts, the
16-bit values exactly half, top-k and PowerSGD far less; the Markdown table names them all.

No accuracy or timing thresholds here: one epoch of a 16-wide MLP proves nothing about them
(the table in docs/benchmarks.md is the full-size run).
"""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from benchmarks import bench_command, compression_suite
from tests.parallel.conftest import no_leftover_processes  # noqa: F401 (a fixture)

pytestmark = pytest.mark.integration

FLAGS = ["compression", "--hidden", "16", "--epochs", "1"]


@pytest.mark.usefixtures("no_leftover_processes")
def test_compression_suite_tabulates_accuracy_and_bytes_for_every_value():
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert bench_command([*FLAGS, "--json"]) == 0
    result = json.loads(buffer.getvalue())["suites"]["compression"]
    assert result["settings"]["hidden"] == [16] and result["settings"]["epochs"] == 1
    rows = {row["compression"]: row for row in result["rows"]}
    assert list(rows) == ["none", "fp16", "bf16", "topk:0.01", "powersgd:2"]
    dense = rows["none"]["gradient_bytes"]
    assert dense > 0 and rows["none"]["compressed_bytes"] == dense and rows["none"]["ratio"] == 1
    for name, row in rows.items():
        assert row["gradient_bytes"] == dense  # the same buckets, counted the same way
        assert row["steps"] == rows["none"]["steps"] > 0
        assert 0 <= row["test_accuracy"] <= 1 and row["skipped_steps"] == 0
        assert row["ratio"] == pytest.approx(dense / row["compressed_bytes"])
        assert (row["loss_scale"] is not None) == (name in ("fp16", "bf16"))
        assert row["met"] is None or isinstance(row["met"], bool)
    assert rows["fp16"]["ratio"] == rows["bf16"]["ratio"] == 2.0
    assert rows["topk:0.01"]["ratio"] > 10
    assert rows["powersgd:2"]["ratio"] > 1
    assert rows["topk:0.01"]["met"] is (rows["topk:0.01"]["test_accuracy"] >= 0.95)

    table = compression_suite.render(result)
    for name in rows:
        assert f"| {name}" in table
    assert "gradient bytes" in table and "skipped steps" in table
