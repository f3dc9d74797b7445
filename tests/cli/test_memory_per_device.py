"""``dtrain plan --what-if --memory-per-device SIZE``: each row's predicted peak per device
beside its step, the rows that need more than SIZE marked and ranked last, how many fit; a
size that does not parse is refused naming the flag before anything starts."""

from __future__ import annotations

import json

import pytest

from workbench.cli.main import main
from workbench.config import RunConfig
from workbench.launch.memory_size import parse_memory_size
from workbench.models import build_model
from workbench.optim import make_optimizer
from workbench.planner.device_costs import described_costs
from workbench.planner.what_if import rank_rows, what_if
from workbench.simulate import parse_cluster

# A described cluster: nothing is calibrated and no Dask cluster starts.
PLAN = [
    "plan",
    "--what-if-cluster",
    "dgx-h100,hosts=1,gpus-per-host=2",
    "--dataset",
    "synthetic:32:4:512",
    "--hidden",
    "16",
    "--batch-size",
    "64",
]


def _plan(capsys, *flags: str) -> tuple[list[dict], dict]:
    assert main([*PLAN, *flags, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    rows = [row for row in printed["configurations"] if row["predicted_step_ms"] is not None]
    return rows, printed


def test_a_size_every_row_fits_in_marks_nothing(capsys):
    rows, printed = _plan(capsys, "--memory-per-device", "16GiB")
    assert printed["memory_per_device"] == 16 * 2**30
    assert printed["fitting"] == len(rows) > 0
    assert all(row["fits"] for row in rows)
    assert all(0 < row["memory_per_device"] < 2**30 for row in rows)
    assert all(row["memory_device"] in row["memory_by_device"] for row in rows)
    assert main([*PLAN, "--memory-per-device", "16GiB"]) == 0
    text = capsys.readouterr().out
    header = text.splitlines()[1]
    assert "peak MB/dev" in header and "fits" not in header.split()
    assert f"{len(rows)} of {len(rows)} configurations fit in 17179.9 MB per device" in text


def test_a_tiny_size_marks_every_row_and_ranks_them_by_memory(capsys):
    rows, printed = _plan(capsys, "--memory-per-device", "1KiB")
    assert printed["fitting"] == 0
    assert not any(row["fits"] for row in rows)
    assert all(row["reason"].startswith("memory: needs") for row in rows)
    assert main([*PLAN, "--memory-per-device", "1KiB"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = lines[1].split()
    assert "fits" in header
    marked = [line for line in lines[2:] if " NO " in line]
    assert len(marked) == len(rows)
    assert lines[-1].endswith(
        f"0 of {len(rows)} configurations fit in 0.0010 MB per device "
        "(fits NO: needs more, ranked last)"
    )


@pytest.mark.parametrize("size", ["lots", "16 GiBs", "-1GB", "0", ""])
def test_a_size_that_does_not_parse_is_refused_naming_the_flag(capsys, size):
    assert main([*PLAN, "--memory-per-device", size]) == 2
    captured = capsys.readouterr()
    assert "--memory-per-device" in captured.err and "Traceback" not in captured.err
    assert captured.out == ""


@pytest.mark.parametrize(
    ("text", "nbytes"),
    [
        ("16GiB", 16 * 2**30),
        ("512MiB", 512 * 2**20),
        ("1.5GB", 1_500_000_000),
        ("4000000000", 4_000_000_000),
        ("64kb", 64_000),
        ("2 TiB", 2 * 2**40),
    ],
)
def test_sizes_read_as_written(text, nbytes):
    assert parse_memory_size(text) == nbytes


def test_the_live_table_is_judged_against_the_size_given():
    # The live path ranks rows predicted without a capacity: the size decides there.
    cluster = parse_cluster("dgx-h100,hosts=1,gpus-per-host=2")
    rows = what_if(
        RunConfig(hidden=(16,), batch_size=64),
        build_model("mlp", (32,), 4, (16,)),
        make_optimizer("momentum"),
        described_costs(cluster),
        cluster.size,
        cluster.devices,
    )
    peaks = sorted(row.to_dict()["memory_per_device"] for row in rows if row.prediction)
    middle = peaks[len(peaks) // 2]
    ranked = rank_rows(rows, middle)
    fitting = [row for row in ranked if row.prediction is not None and row.fits]
    assert len(fitting) == sum(peak <= middle for peak in peaks)
    assert all(row.to_dict()["memory_per_device"] <= middle for row in fitting)
    # Every row that fits ranks before every row that does not.
    fits = [row.fits for row in ranked if row.prediction is not None]
    assert fits == sorted(fits, reverse=True)


def test_the_notebook_table_marks_the_same_rows():
    from workbench.launch.what_if import plan_what_if
    from workbench.notebook.what_if_view import WhatIfTable

    config = RunConfig(dataset="synthetic:32:4:512", hidden=(16,), batch_size=64)
    plan = plan_what_if(config, "dgx-h100,hosts=1,gpus-per-host=2", print, 1024)
    table = WhatIfTable(plan)
    predicted = [row for row in plan.rows if row.prediction is not None]
    html = table._repr_html_()
    assert "<th>peak MB / device</th>" in html and "<th>fits</th>" in html
    assert html.count("<td>NO</td>") == len(predicted)
    assert f"0 of {len(predicted)} configurations fit" in html
    assert f"0 of {len(predicted)} configurations fit" in repr(table)
