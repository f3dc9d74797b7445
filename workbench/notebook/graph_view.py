"""The partitioned graph of a model-parallel run, drawn: one lane per device (its colour), the
device's nodes in the order they run, edges inside a partition in grey, and every Send/Recv pair
as a red dashed edge between the lanes, labelled by its rendezvous key on hover. With the cost
model's prediction (a model-parallel plan has one), each lane's label gives the device's
predicted busy milliseconds, each Send/Recv pair's tooltip its bytes and predicted
milliseconds, and the title the predicted step. A pipeline's split is drawn the same way, one
lane per stage (:func:`pipeline_view`). The ``all_reduce`` nodes of a tensor-parallel (or in-graph
replicated) graph are diamonds, and the nodes of one collective (one key, a node per device)
are joined by a purple dotted edge (docs/guide/distributed-training.md, "Tensor parallelism").

``plan_view(config)`` builds the same plan ``dtrain plan`` prints, without starting anything.
"""

from __future__ import annotations

from itertools import pairwise

from bokeh.models import ColumnDataSource, HoverTool
from bokeh.palettes import Category10
from bokeh.plotting import figure

from workbench.config import RunConfig
from workbench.data import load_dataset
from workbench.launch.graph_plans import graph_plan
from workbench.models import build_model
from workbench.parallel.model_parallel.graph import ModelParallelPlan, Prediction
from workbench.parallel.pipeline.stages import split_layers
from workbench.passes import Partitioned
from workbench.passes.recompute import RECOMPUTED
from workbench.runtime import device_name
from workbench.strategies import validate_config
from workbench.strategies.options import PipelineOptions

MARKERS = {"send": "triangle", "recv": "inverted_triangle"}
COLLECTIVE_MARKER = "diamond"  # an all_reduce node


def partition_figure(
    partitioned: Partitioned, width: int = 920, prediction: Prediction | None = None
) -> figure:
    """One lane per device of ``partitioned``, with ``prediction``'s costs if given."""
    devices = list(partitioned.partitions)
    colours = {device: Category10[10][i % 10] for i, device in enumerate(devices)}
    position: dict[str, tuple[int, int]] = {}
    nodes: dict[str, list] = {
        "x": [],
        "y": [],
        "name": [],
        "op": [],
        "device": [],
        "colour": [],
        "marker": [],
        "size": [],
    }
    inside: dict[str, list] = {"x0": [], "y0": [], "x1": [], "y1": []}
    for lane, (device, graph) in enumerate(partitioned.partitions.items()):
        for order, node in enumerate(graph.nodes):
            position[node.name] = (order, lane)
            nodes["x"].append(order)
            nodes["y"].append(lane)
            nodes["name"].append(node.name)
            nodes["op"].append(node.op)
            nodes["device"].append(device)
            nodes["colour"].append(colours[device])
            default = COLLECTIVE_MARKER if node.op == "all_reduce" else "circle"
            nodes["marker"].append(MARKERS.get(node.op, default))
            nodes["size"].append(14 if node.op == "all_reduce" else 9)
        for node in graph.nodes:
            for value in node.inputs:
                if value.node in position and position[value.node][1] == lane:
                    x0, y0 = position[value.node]
                    x1, y1 = position[node.name]
                    inside["x0"].append(x0)
                    inside["y0"].append(y0)
                    inside["x1"].append(x1)
                    inside["y1"].append(y1)
    sends: dict[str, str] = {}
    receives: dict[str, str] = {}
    for graph in partitioned.partitions.values():
        for node in graph.nodes:
            if node.op in MARKERS:
                (sends if node.op == "send" else receives)[node.attrs["key"]] = node.name
    nbytes = {transfer.key: transfer.nbytes for transfer in partitioned.transfers}
    seconds = prediction.transfer_seconds if prediction is not None else {}
    across: dict[str, list] = {c: [] for c in ("x0", "y0", "x1", "y1", "key", "bytes", "ms")}
    for key, sender in sends.items():
        if key in receives:
            (x0, y0), (x1, y1) = position[sender], position[receives[key]]
            ms = f"{1e3 * seconds[key]:.3f}" if key in seconds else "-"
            row = (x0, y0, x1, y1, key, f"{nbytes.get(key, 0):,}", ms)
            for column, cell in zip(across, row):
                across[column].append(cell)

    collectives = _collective_edges(partitioned, position)
    title = f"partitioned graph: {len(devices)} devices, {len(sends)} Send/Recv pairs"
    if collectives["key"]:
        count = len(set(collectives["key"]))
        title += f", {count} all-reduce{'' if count == 1 else 's'}"
    recomputed = sum(
        node.name.endswith(f"/{RECOMPUTED}")
        for graph in partitioned.partitions.values()
        for node in graph.nodes
    )
    if recomputed:  # --recompute's clones (workbench/passes/recompute.py)
        title += f", {recomputed} nodes recomputed in backward"
    lanes = list(devices)
    if prediction is not None:
        busy = prediction.schedule.busy
        lanes = [f"{device} (busy {1e3 * busy.get(device, 0.0):.1f} ms)" for device in devices]
        title += f", predicted step {1e3 * prediction.schedule.seconds:.1f} ms"
    chart = _lanes_figure(
        title, lanes, "position in the device's partition (execution order)", width
    )
    chart.segment("x0", "y0", "x1", "y1", source=ColumnDataSource(inside), color="#bbbbbb")
    pairs = _send_recv_edges(chart, across)
    reduces = chart.segment(
        "x0",
        "y0",
        "x1",
        "y1",
        source=ColumnDataSource(collectives),
        color="purple",
        line_dash="dotted",
        line_width=2,
        # Only a graph with collectives names them in the legend.
        **({"legend_label": "all-reduce"} if collectives["key"] else {}),
    )
    dots = chart.scatter(
        "x", "y", source=ColumnDataSource(nodes), color="colour", marker="marker", size="size"
    )
    chart.add_tools(HoverTool(renderers=[dots], tooltips=[("node", "@name"), ("op", "@op")]))
    chart.add_tools(
        HoverTool(
            renderers=[pairs],
            tooltips=[("key", "@key"), ("bytes", "@bytes"), ("predicted ms", "@ms")],
        )
    )
    chart.add_tools(
        HoverTool(renderers=[reduces], tooltips=[("all-reduce", "@key"), ("bytes", "@bytes")])
    )
    return chart


def _collective_edges(
    partitioned: Partitioned, position: dict[str, tuple[int, int]]
) -> dict[str, list]:
    """One edge between the all_reduce nodes of one key on neighbouring lanes: the devices
    that sum that tensor together."""
    members: dict[str, list[tuple[int, int, int]]] = {}
    for graph in partitioned.partitions.values():
        for node in graph.nodes_with_op("all_reduce"):
            x, y = position[node.name]
            members.setdefault(node.attrs["key"], []).append((x, y, node.types[0].nbytes))
    edges: dict[str, list] = {c: [] for c in ("x0", "y0", "x1", "y1", "key", "bytes")}
    for key, ends in members.items():
        ends.sort(key=lambda end: end[1])
        for (x0, y0, nbytes), (x1, y1, _) in pairwise(ends):
            for column, cell in zip(edges, (x0, y0, x1, y1, key, f"{nbytes:,}")):
                edges[column].append(cell)
    return edges


def plan_view(config: RunConfig, model=None) -> figure:
    """The plan of ``config`` (its model preset, or ``model``), drawn: a model-parallel
    placement (with the cost model's predicted busy time per device and milliseconds per
    Send/Recv pair, as ``dtrain plan`` prints them), a parameter-server graph (one lane per
    worker and per PS task) or an in-graph replicated graph (one lane per tower)."""

    config, model = _checked_model(config, model)
    plan = graph_plan(config, model)
    prediction = plan.prediction if isinstance(plan, ModelParallelPlan) else None
    return partition_figure(plan.partitioned, prediction=prediction)


def pipeline_figure(model, stages: list[range], devices: list[str], width: int = 920) -> figure:
    """A pipeline's split, drawn: one lane per stage's device with its layers in order, and
    between consecutive stages the two Send/Recv pairs every micro-batch crosses (activations
    forward, their gradients backward)."""
    colours = {device: Category10[10][i % 10] for i, device in enumerate(devices)}
    boxes: dict[str, list] = {"x": [], "y": [], "layer": [], "device": [], "colour": []}
    for lane, (layers, device) in enumerate(zip(stages, devices, strict=True)):
        for index in layers:
            boxes["x"].append(index)
            boxes["y"].append(lane)
            boxes["layer"].append(model.layers[index].name)
            boxes["device"].append(device)
            boxes["colour"].append(colours[device])
    edges: dict[str, list] = {"x0": [], "y0": [], "x1": [], "y1": [], "what": []}
    for lane in range(len(stages) - 1):
        last, first = stages[lane][-1], stages[lane + 1][0]
        for x0, y0, x1, y1, what in (
            (last, lane + 0.12, first, lane + 1 - 0.12, "Send/Recv: activations (forward)"),
            (first, lane + 1 + 0.12, last, lane - 0.12, "Send/Recv: input gradients (backward)"),
        ):
            for column, value in zip(("x0", "y0", "x1", "y1", "what"), (x0, y0, x1, y1, what)):
                edges[column].append(value)
    chart = _lanes_figure(
        f"pipeline: {len(model.layers)} layers over {len(stages)} stages", devices, "layer", width
    )
    pairs = _send_recv_edges(chart, edges)
    cells = chart.rect(
        "x", "y", width=0.8, height=0.5, source=ColumnDataSource(boxes), color="colour"
    )
    chart.add_tools(HoverTool(renderers=[cells], tooltips=[("layer", "@layer"), ("on", "@device")]))
    chart.add_tools(HoverTool(renderers=[pairs], tooltips=[("", "@what")]))
    return chart


def pipeline_view(config: RunConfig, model=None) -> figure:
    """The stages a pipeline run of ``config`` would use (its model preset, or ``model``)."""

    config, model = _checked_model(config, model)
    stages = config.options_of(PipelineOptions).stages
    devices = [device_name("cpu", task=rank) for rank in range(stages)]
    return pipeline_figure(model, split_layers(model, stages), devices)


def _lanes_figure(title: str, lanes: list[str], x_label: str, width: int) -> figure:
    """An empty figure with one horizontal lane per device, labelled with its name."""
    chart = figure(
        title=title,
        width=width,
        height=120 + 90 * len(lanes),
        y_range=(-0.6, len(lanes) - 0.4),
        x_axis_label=x_label,
        tools="pan,wheel_zoom,box_zoom,reset,save",
    )
    chart.yaxis.ticker = list(range(len(lanes)))
    chart.yaxis.major_label_overrides = dict(enumerate(lanes))
    return chart


def _send_recv_edges(chart: figure, edges: dict[str, list]):
    """Send/Recv pairs as red dashed edges between lanes; returns their renderer."""
    return chart.segment(
        "x0",
        "y0",
        "x1",
        "y1",
        source=ColumnDataSource(edges),
        color="firebrick",
        line_dash="dashed",
        line_width=2,
        legend_label="Send/Recv",
    )


def _checked_model(config: RunConfig, model):
    """``config`` checked, and ``model`` or its preset built for the data set's shapes."""

    config = validate_config(config)
    dataset = load_dataset(config.dataset, seed=config.seed)
    if model is None:
        model = build_model(config.model, dataset.input_shape, dataset.num_classes, config.hidden)
    return config, model
