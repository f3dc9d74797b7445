"""The notebook's planning views: the what-if table names each configuration as the CLI does
(every option, compression included), and the predicted-against-measured chart is tall enough
to read, its labels on the y axis."""

from workbench.launch.what_if import plan_what_if
from workbench.notebook.what_if_view import WhatIfTable
from workbench.planner.what_if import format_table

DESCRIBED = "dgx-h100,hosts=1,gpus-per-host=2"


def describe_options(options: dict) -> str:
    """How the CLI's table names a configuration."""
    return " ".join(f"{key}={value}" for key, value in options.items())


def _plan():
    from workbench.config import RunConfig

    config = RunConfig(dataset="synthetic:32:4:512", hidden=(16,), batch_size=64)
    return plan_what_if(config, DESCRIBED, print)


def test_the_notebook_table_names_every_option_as_the_cli_does():
    plan = _plan()
    table = WhatIfTable(plan)
    html = table._repr_html_()
    for row in plan.rows:
        assert f"<td>{describe_options(row.options)}</td>" in html
    assert "compression=topk:0.01" in html and "compression=powersgd:2" in html
    # Rows that differ differ in name: no two mirrored rings read alike.
    names = [f"{row.strategy} {describe_options(row.options)}" for row in plan.rows]
    assert len(set(names)) == len(names)
    assert repr(table).endswith(format_table(plan.rows))


def test_the_prediction_chart_is_horizontal_bars_as_tall_as_its_rows():
    from workbench.notebook.what_if_view import prediction_chart

    results = [
        ("mirrored --allreduce hierarchical-copy --compression topk:0.01", 19.4, 20.3),
        ("pipeline --schedule 1f1b --microbatches 8", 14.8, 15.9),
        ("parameter-server --ps 2", 30.1, None),
    ]
    chart = prediction_chart(results)
    (bars,) = chart.renderers
    assert type(bars.glyph).__name__ == "HBar"
    labels = [name for name, _ in chart.y_range.factors]
    assert set(labels) == {name for name, _, _ in results}
    assert labels[-1] == results[0][0]  # the first configuration on top
    # Each configuration's two bars get a band of their own, beside the title and axis.
    assert chart.height >= 90 + 40 * len(results)
    assert chart.xaxis[0].axis_label == "step time (ms)"
    data = bars.data_source.data
    assert dict(zip(data["y"], data["ms"]))[(results[0][0], "measured")] == 20.3
