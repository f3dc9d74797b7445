"""The placement suite runs end to end with a tiny configuration (a 16-wide MLP, 12 steps, one
trial each) and reports figures that hold together: one row per placement, step times from the
summaries, the plan's predictions, alternating trials, the ratio and its verdict.

No timing threshold here: 12 steps of a 16-wide MLP prove nothing about placement (the
table in docs/benchmarks.md is the full-size run).
"""

from __future__ import annotations

import contextlib
import io
import json
import os

import pytest

from benchmarks import bench_command, placement_suite
from tests.parallel.conftest import no_leftover_processes  # noqa: F401 (a fixture)
from workbench.store import STORE_ENVIRONMENT

FLAGS = ["placement", "--placement-hidden", "16", "--placement-batch", "32"]
FLAGS += ["--placement-models", "mlp", "--train-steps", "12", "--repeats", "1"]


@pytest.mark.integration
@pytest.mark.usefixtures("no_leftover_processes")
def test_placement_suite_compares_greedy_and_balanced_params_step_times(tmp_path, monkeypatch):
    monkeypatch.setenv(STORE_ENVIRONMENT, str(tmp_path))
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert bench_command([*FLAGS, "--json"]) == 0
    suite = json.loads(buffer.getvalue())["suites"]["placement"]
    (result,) = suite["cases"]
    assert result["case"]["hidden"] == [16] and result["case"]["batch_size"] == 32
    assert [trial["placement"] for trial in result["trials"]] == ["greedy", "balanced-params"]
    rows = {row["placement"]: row for row in result["rows"]}
    for placement, row in rows.items():
        (trial,) = [t for t in result["trials"] if t["placement"] == placement]
        assert row["step_ms"]["median"] == trial["step_ms"] > 0
        assert trial["step_ms"] == pytest.approx(32e3 / trial["samples_per_second"])
        assert trial["predicted_step_ms"] > 0 and len(trial["predicted_busy_ms"]) == 2
    # Balanced-params always cuts the model; its largest transfer is a 16-wide activation.
    (balanced,) = [t for t in result["trials"] if t["placement"] == "balanced-params"]
    assert balanced["send_recv_pairs"] > 0 and balanced["bytes_sent_per_step"] > 0
    assert balanced["largest_transfers"][0]["bytes"] == 32 * 16 * 4
    ratio = rows["greedy"]["step_ms"]["median"] / rows["balanced-params"]["step_ms"]["median"]
    assert result["ratio"]["of_medians"] == pytest.approx(ratio)
    assert result["met"] is (ratio <= 0.9) and suite["met"] is result["met"]
    # Each run had a store of its own; the caller's store is as it was.
    assert os.environ[STORE_ENVIRONMENT] == str(tmp_path) and not any(tmp_path.iterdir())

    table = placement_suite.render(suite)
    assert "| MLP 16 on synthetic, batch 32 | greedy |" in table
    assert "| MLP 16 on synthetic, batch 32 | balanced-params |" in table
    assert "greedy / balanced-params step time" in table and "largest Send/Recv" in table


def test_the_placement_suite_compares_an_mlp_and_the_cnn_by_default():
    cases = placement_suite.PlacementSettings().cases
    assert [(case.model, case.dataset) for case in cases] == [
        ("mlp", "synthetic"),
        ("cnn", "digits"),
    ]
    assert cases[0].hidden == (256, 2048, 2048, 256)
