"""``%dtrain plan --what-if`` returns the ranked table (HTML in a notebook, rows as dicts);
``%dtrain plan`` draws the run's placed graph."""

import pytest

from workbench.notebook.what_if_view import WhatIfTable


def test_what_if_on_a_described_cluster_is_a_ranked_html_table(shell, store_root):
    table = shell.run_line_magic(
        "dtrain",
        "plan --what-if-cluster dgx-h100,hosts=1,gpus-per-host=2 --dataset synthetic "
        "--batch-size 512",
    )
    assert isinstance(table, WhatIfTable)
    predicted = [row for row in table.rows if row["predicted_step_ms"] is not None]
    assert predicted[0]["reason"] == "fastest"
    html = table._repr_html_()
    assert html.count("<tr>") == len(table.rows) + 1
    assert "dgx-h100" in html and "fastest" in html


@pytest.mark.integration
def test_plan_without_what_if_draws_the_partitioned_graph(shell, store_root):
    figure = shell.run_line_magic("dtrain", "plan --strategy model-parallel --devices 2")
    assert type(figure).__name__ == "figure"
