"""The drawn partitioned graph: every node of every partition on its device's lane, and one
red edge per Send/Recv pair, matching the plan ``dtrain plan`` prints."""

from __future__ import annotations

import pytest

from workbench.config import RunConfig
from workbench.notebook.graph_view import partition_figure, plan_view


@pytest.mark.integration
def test_the_drawing_has_every_node_and_one_edge_per_send_recv_pair():
    config = RunConfig(
        strategy="model-parallel", devices=2, hidden=(32, 32), placement="balanced-params"
    )
    chart = plan_view(config)
    renderers = {r.glyph.__class__.__name__: r for r in chart.renderers}
    nodes = renderers["Scatter"].data_source.data
    assert set(nodes["device"]) == {
        "/job:worker/task:0/device:CPU:0",
        "/job:worker/task:1/device:CPU:0",
    }
    pairs = [r for r in chart.renderers if r.glyph.__class__.__name__ == "Segment"][1]
    keys = pairs.data_source.data["key"]
    # 9: each device feeds its own learning rate, so it does not cross.
    assert nodes["op"].count("send") == nodes["op"].count("recv") == len(keys) == 9
    assert "9 Send/Recv pairs" in chart.title.text


@pytest.mark.integration
def test_a_model_parallel_drawing_shows_the_predicted_costs(tmp_path, monkeypatch):
    from bokeh.models import HoverTool

    from workbench.store import STORE_ENVIRONMENT

    monkeypatch.setenv(STORE_ENVIRONMENT, str(tmp_path))  # fixed rates: nothing cached there
    config = RunConfig(
        strategy="model-parallel", devices=2, hidden=(32, 32), placement="balanced-params"
    )
    chart = plan_view(config)
    lanes = chart.yaxis.major_label_overrides
    assert lanes[0].startswith("/job:worker/task:0/device:CPU:0 (busy ")
    assert all(label.endswith(" ms)") for label in lanes.values())
    assert "predicted step" in chart.title.text
    pairs = [r for r in chart.renderers if r.glyph.__class__.__name__ == "Segment"][1]
    data = pairs.data_source.data
    assert len(data["ms"]) == len(data["bytes"]) == len(data["key"]) == 9
    # Fixed rates: 2 ms a message, so every pair takes at least 2 ms.
    assert all(float(ms) >= 2.0 for ms in data["ms"])
    activation = next(b for k, b in zip(data["key"], data["bytes"]) if "dense_0/relu" in k)
    assert activation == f"{32 * 32 * 4:,}"
    tooltips = [t.tooltips for t in chart.tools if isinstance(t, HoverTool)]
    assert [("key", "@key"), ("bytes", "@bytes"), ("predicted ms", "@ms")] in tooltips


def test_a_parameter_server_plan_has_a_lane_per_worker_and_ps_task():
    config = RunConfig(strategy="parameter-server", devices=2, ps=2, hidden=(32,))
    chart = plan_view(config)
    nodes = next(r for r in chart.renderers if r.glyph.__class__.__name__ == "Scatter")
    devices = set(nodes.data_source.data["device"])
    assert devices == {
        "/job:worker/task:0/device:CPU:0",
        "/job:ps/task:0/device:CPU:0",
        "/job:ps/task:1/device:CPU:0",
    }
    ops = nodes.data_source.data["op"]
    # Between-graph: worker 0's graph; one pull and one push per variable (4 variables).
    assert ops.count("send") == ops.count("recv") == 8
    assert "8 Send/Recv pairs" in chart.title.text


def test_an_in_graph_plan_has_a_lane_per_tower():
    config = RunConfig(
        strategy="central-storage", devices=3, batch_size=48, replication="in-graph", hidden=(16,)
    )
    chart = plan_view(config)
    nodes = next(r for r in chart.renderers if r.glyph.__class__.__name__ == "Scatter")
    names = nodes.data_source.data["name"]
    assert {name.split("/")[0] for name in names if name.startswith("tower_")} == {
        "tower_0",
        "tower_1",
        "tower_2",
    }


def test_three_devices_get_three_lanes():
    from workbench.data import load_dataset
    from workbench.models import build_model
    from workbench.optim import make_optimizer
    from workbench.parallel.model_parallel.graph import build_model_parallel_graph

    dataset = load_dataset("digits", seed=0)
    model = build_model("mlp", dataset.input_shape, dataset.num_classes, (16, 16, 16))
    devices = [f"/job:worker/task:{i}/device:CPU:0" for i in range(3)]
    plan = build_model_parallel_graph(
        model, make_optimizer("sgd"), 32, "float32", devices, placement="balanced-params"
    )
    chart = partition_figure(plan.partitioned)
    lanes = set(chart.renderers[-1].data_source.data["y"])
    assert lanes == {0, 1, 2} and chart.yaxis.major_label_overrides[2] == devices[2]


def test_a_pipeline_is_drawn_as_its_stages_with_send_recv_between_them():
    from workbench.notebook.graph_view import pipeline_view

    chart = pipeline_view(RunConfig(strategy="pipeline", devices=3, stages=3, hidden=(16, 16, 16)))
    boxes = next(r for r in chart.renderers if r.glyph.__class__.__name__ == "Rect")
    layers = boxes.data_source.data["layer"]
    assert layers == ["flatten_0", "dense_0", "dense_1", "dense_2", "dense_3"]
    lanes = boxes.data_source.data["y"]
    assert sorted(set(lanes)) == [0, 1, 2] and lanes == sorted(lanes)  # contiguous stages
    pairs = next(r for r in chart.renderers if r.glyph.__class__.__name__ == "Segment")
    assert len(pairs.data_source.data["what"]) == 4  # forward and backward per stage boundary
    assert "3 stages" in chart.title.text
