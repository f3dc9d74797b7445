"""The drawn partitioned graph: every node of every partition on its device's lane, and one
red edge per Send/Recv pair, matching the plan ``dtrain plan`` prints."""

from __future__ import annotations

from workbench.config import RunConfig
from workbench.notebook.graph_view import partition_figure, plan_view


def test_the_drawing_has_every_node_and_one_edge_per_send_recv_pair():
    chart = plan_view(RunConfig(strategy="model-parallel", devices=2, hidden=(32, 32)))
    renderers = {r.glyph.__class__.__name__: r for r in chart.renderers}
    nodes = renderers["Scatter"].data_source.data
    assert set(nodes["device"]) == {
        "/job:worker/task:0/device:CPU:0",
        "/job:worker/task:1/device:CPU:0",
    }
    pairs = [r for r in chart.renderers if r.glyph.__class__.__name__ == "Segment"][1]
    keys = pairs.data_source.data["key"]
    assert nodes["op"].count("send") == nodes["op"].count("recv") == len(keys) == 10
    assert "10 Send/Recv pairs" in chart.title.text


def test_three_devices_get_three_lanes():
    from workbench.data import load_dataset
    from workbench.models import build_model
    from workbench.optim import make_optimizer
    from workbench.parallel.model_parallel_graph import build_model_parallel_graph

    dataset = load_dataset("digits", seed=0)
    model = build_model("mlp", dataset.input_shape, dataset.num_classes, (16, 16, 16))
    devices = [f"/job:worker/task:{i}/device:CPU:0" for i in range(3)]
    plan = build_model_parallel_graph(model, make_optimizer("sgd"), 32, "float32", devices)
    chart = partition_figure(plan.partitioned)
    lanes = set(chart.renderers[-1].data_source.data["y"])
    assert lanes == {0, 1, 2} and chart.yaxis.major_label_overrides[2] == devices[2]
