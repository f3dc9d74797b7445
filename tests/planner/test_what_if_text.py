"""The printed what-if table reads as a table: every column lines up however long a row's
options are."""

from workbench.config import RunConfig
from workbench.models import build_model
from workbench.optim import make_optimizer
from workbench.planner.device_costs import described_costs
from workbench.planner.what_if import format_table, what_if
from workbench.simulate import parse_cluster


def describe_options(options: dict) -> str:
    return " ".join(f"{key}={value}" for key, value in options.items())


def test_columns_line_up_for_long_option_strings():
    cluster = parse_cluster("dgx-h100,hosts=1,gpus-per-host=2")
    rows = what_if(
        RunConfig(batch_size=256),
        build_model("mlp", (784,), 10, (64,)),
        make_optimizer("momentum"),
        described_costs(cluster),
        cluster.size,
        cluster.devices,
    )
    longest = max(len(describe_options(row.options)) for row in rows)
    assert longest > 40  # e.g. "devices=2 stages=2 microbatches=8 schedule=gpipe"
    header, *lines = format_table(rows).splitlines()
    for column in ("step ms", "samples/s", "MB sent/dev", "bubble"):
        end = header.index(column) + len(column)
        for line, row in zip(lines, rows):
            if row.prediction is not None:
                assert line[end] == " " and line[end - 1] != " ", (column, line)
    # The options column starts at one place and holds each row's whole configuration.
    start = header.index("options")
    for line, row in zip(lines, rows):
        assert line[start:].startswith(describe_options(row.options))
