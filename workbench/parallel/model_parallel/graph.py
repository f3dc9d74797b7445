"""The model-parallel training graph: built whole, placed over the devices, partitioned with
Send/Recv pairs on every edge between two devices.

How it is placed (``--placement``, :data:`PLACEMENTS`):

- ``greedy`` (the default): only the user's layer constraints (``layer.device``) are pinned;
  every other node (variables, forward and backward ops, the loss, the placeholders) goes
  where the greedy placer (:func:`~workbench.passes.place`) predicts it finishes first, with
  the run's cost model (times measured at the start of the run). Gradients are free to leave
  their forward node's device, so a weight's gradient may run on one device while another
  goes on with the input's gradient.
- ``balanced-params``: the rule before the cost model decided: contiguous groups of layers
  balanced by parameter count, one per device (or the user's constraints, if the model has
  any), the inputs on the first device, labels and loss on the last, gradients with their
  forward nodes.
- ``manual``: the user's constraints alone; a layer without one follows the layer before it
  (the first ones go to the first device); gradients with their forward nodes.

The plan carries what the cost model predicts for the placement (each device's busy time,
each Send/Recv's seconds, the step), which ``dtrain plan`` prints and ``plan_view`` draws.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import cast

from workbench.costs import CalibratedCostModel, CostModel, StaticCostModel
from workbench.ir import Graph, GraphBuilder, gradients, ops
from workbench.models import ApplyContext, Sequential
from workbench.optim import Optimizer, emit_updates
from workbench.parallel.pipeline.stages import split_layers
from workbench.passes import (
    Partitioned,
    PassReport,
    PlacementError,
    Schedule,
    partition,
    place,
    predict_schedule,
    recompute_passes,
    run_passes,
)
from workbench.passes.place import resolve_device
from workbench.training.graphs import DROPOUT_SEED, INPUTS, LABELS, LEARNING_RATE

PLACEMENTS = ("greedy", "balanced-params", "manual")
# A model-parallel device makes each of these feeds itself (the same global batch, the step's
# learning rate and dropout seed), so a device that reads one feeds its own copy.
FED_EVERYWHERE = (INPUTS, LABELS, LEARNING_RATE, DROPOUT_SEED)


@dataclass(frozen=True)
class Prediction:
    """What the cost model predicts for a placed graph: ``schedule`` (each device's busy
    seconds, the step's), each Send/Recv's seconds by key, and where the costs came from."""

    source: str
    schedule: Schedule
    transfer_seconds: Mapping[str, float]
    nodes: Mapping[str, int]  # nodes per device, Send/Recv not counted

    def lines(self) -> list[str]:
        schedule = self.schedule
        width = max((len(device) for device in schedule.devices), default=0)
        lines = [f"predicted costs ({self.source}):"]
        for device in schedule.devices:
            busy = 1e3 * schedule.busy[device]
            lines.append(
                f"  {device:<{width}}  busy {busy:8.2f} ms  ({self.nodes.get(device, 0)} nodes)"
            )
        work, step = 1e3 * sum(schedule.busy.values()), 1e3 * schedule.seconds
        moved = 1e3 * sum(self.transfer_seconds.values())
        lines += [
            f"  step {step:.2f} ms: when the last node finishes, each device running its nodes "
            "in order and waiting for its Recvs",
            f"  {work:.2f} ms of work in a {step:.2f} ms step: the devices compute at the same "
            f"time for at least {max(0.0, work - step):.2f} ms; {len(self.transfer_seconds)} "
            f"Send/Recv pairs take {moved:.2f} ms",
        ]
        return lines


@dataclass(frozen=True)
class ModelParallelPlan:
    placed: Graph
    partitioned: Partitioned
    layer_devices: tuple[tuple[str, str], ...]  # (layer, or tower, device)
    heading: str = "placement of layers:"
    prediction: Prediction | None = None
    # Layers some of whose backward nodes run elsewhere: layer -> every device of its backward.
    backward_devices: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # What the graph passes did before placement (recomputation's clones among them).
    report: PassReport | None = None
    # Lines printed after the layers (a tensor-parallel plan's collectives per rank).
    notes: tuple[str, ...] = ()

    def describe(self) -> str:
        lines = [self.heading]
        for layer, device in self.layer_devices:
            also = self.backward_devices.get(layer)
            backward = f"  (backward on {', '.join(also)})" if also else ""
            lines.append(f"  {layer:<18} {device}{backward}")
        lines += self.notes
        seconds = None
        if self.prediction is not None:
            lines += self.prediction.lines()
            seconds = self.prediction.transfer_seconds
        if self.report is not None:
            lines.append(self.report.summary())
        lines.append("partitions and Send/Recv pairs:")
        lines.append(self.partitioned.describe(seconds))
        return "\n".join(lines)


def build_model_parallel_graph(
    model: Sequential,
    optimizer: Optimizer,
    batch_size: int,
    dtype: str,
    devices: Sequence[str],
    placement: str = "greedy",
    cost: CostModel | None = None,
    cost_source: str | None = None,
    recompute: str = "none",
) -> ModelParallelPlan:
    """The whole training graph of ``model``, placed over ``devices`` as ``placement`` says
    (see the module docstring) and partitioned, with the costs ``cost`` predicts for it;
    ``recompute`` (the ``--recompute`` policy) rewrites it before placement, so the clones
    are placed, partitioned and costed with the rest.

    Examples
    --------
    >>> from workbench.models import mlp
    >>> from workbench.optim import make_optimizer
    >>> plan = build_model_parallel_graph(
    ...     mlp((8,), 2, (4,)), make_optimizer("sgd"), 4, "float32", ["/task:0", "/task:1"],
    ...     placement="balanced-params")
    >>> plan.layer_devices
    (('dense_0', '/task:0'), ('dense_1', '/task:1'))
    >>> len(plan.partitioned.transfers) > 0 < plan.prediction.schedule.seconds
    True
    """
    if placement not in PLACEMENTS:
        raise ValueError(f"unknown placement {placement!r}; choose one of: {PLACEMENTS}")
    cost = cost or StaticCostModel()
    pinned = _pinned_layers(model, devices, placement)
    free = placement == "greedy"
    builder = GraphBuilder()
    input_dtype = "int64" if model.takes_integer_input else dtype
    with _on(builder, None if free else devices[0]):
        x = builder.placeholder(INPUTS, (batch_size, *model.input_shape), input_dtype)
    seed = builder.placeholder(DROPOUT_SEED, (), "int64") if model.uses_dropout else None
    shapes, params = model.parameter_shapes(), {}
    for index in range(len(model.layers)):
        with _on(builder, pinned[index]):
            for name in model.parameter_names(range(index, index + 1)):
                params[name] = builder.variable(name, shapes[name], dtype)
            x = model.apply(
                x, params, ApplyContext(training=True, dropout_seed=seed), range(index, index + 1)
            )
    with _on(builder, None if free else devices[-1]):
        labels = builder.placeholder(LABELS, (batch_size,), "int64")
        loss = ops.softmax_cross_entropy(x, labels)
    ordered = {name: params[name] for name in shapes}
    grads = gradients(builder, loss, list(ordered.values()))
    learning_rate = builder.placeholder(LEARNING_RATE, (), dtype)
    after = [loss.value.node, *(grad.value.node for grad in grads)]
    with builder.scope("update"):
        emit_updates(optimizer, ordered, grads, learning_rate, after)
    final = recompute_passes(recompute, [layer.name for layer in model.layers])
    graph, report = run_passes(builder.build({"loss": loss}), final=final)
    # TF's colocate_gradients_with_ops where layers are pinned (by the user or by the split);
    # greedy lets a gradient go where it finishes first.
    colocate = not free or any(device is not None for device in pinned.values())
    placed = place(graph, devices, cost, colocate, FED_EVERYWHERE)
    partitioned = partition(placed, devices, FED_EVERYWHERE)
    forward, backward = _layer_devices(placed)
    layer_devices = tuple(
        (layer.name, pinned[index] or forward.get(layer.name, "(no nodes)"))
        for index, layer in enumerate(model.layers)
    )
    on_layer = dict(layer_devices)
    split = {
        name: on for name, on in backward.items() if name in on_layer and on != (on_layer[name],)
    }
    source = cost_source or describe_cost(cost)
    if isinstance(cost, CalibratedCostModel):
        timed = [n for n in placed.nodes if n.op not in ("placeholder", "constant")]
        measured = sum(cost.is_measured(placed, n) for n in timed)
        source += (
            f"; {measured} of {len(timed)} nodes timed at these shapes, the rest scaled from "
            "measured FLOP rates"
        )
    prediction = predict_plan(placed, partitioned, cost, source)
    return ModelParallelPlan(
        placed,
        partitioned,
        layer_devices,
        prediction=prediction,
        backward_devices=split,
        report=report,
    )


def predict_plan(
    placed: Graph, partitioned: Partitioned, cost: CostModel, source: str
) -> Prediction:
    """What ``cost`` predicts for a placed and partitioned model-parallel graph."""
    devices = list(partitioned.partitions)
    seconds = {
        t.key: cost.transfer_seconds(t.nbytes, t.source, t.target) for t in partitioned.transfers
    }
    nodes = {device: 0 for device in devices}
    for node in placed.nodes:
        nodes[cast(str, node.device)] += 1  # a placed graph's nodes all have a device
    schedule = predict_schedule(placed, devices, cost, FED_EVERYWHERE)
    return Prediction(source, schedule, seconds, nodes)


def _pinned_layers(
    model: Sequential, devices: Sequence[str], placement: str
) -> dict[int, str | None]:
    """The device each layer is pinned to (None: the placer decides)."""
    constrained = any(layer.device for layer in model.layers)
    if placement == "manual" and not constrained:
        raise PlacementError(
            "manual placement: no layer has a device constraint; pin layers with "
            "workbench.device(...), or place them greedily or by balanced parameters"
        )
    if placement == "balanced-params" and not constrained:
        groups = split_layers(model, len(devices))
        return {i: devices[g] for g, layers in enumerate(groups) for i in layers}
    pinned: dict[int, str | None] = {}
    current = None if placement == "greedy" else devices[0]
    for index, layer in enumerate(model.layers):
        if layer.device:
            try:
                device = resolve_device(layer.device, devices)
            except PlacementError as error:
                raise PlacementError(f"layer {layer.name}: {error}") from None
            current = device
            pinned[index] = device
        else:  # greedy: the placer's; otherwise the layer before's
            pinned[index] = current if placement != "greedy" else None
    return pinned


def _on(builder: GraphBuilder, device: str | None) -> AbstractContextManager:
    return nullcontext() if device is None else builder.device(device)


def _layer_devices(placed: Graph) -> tuple[dict[str, str], dict[str, tuple[str, ...]]]:
    """Each layer's device (its variables', else its first forward node's) and the devices
    its backward nodes run on (a layer's nodes are named ``<layer>/...``, their gradients
    ``gradients/<layer>/...``)."""
    first: dict[str, str] = {}
    held: dict[str, str] = {}
    backward: dict[str, dict[str, None]] = {}
    for node in placed.nodes:
        top, _, rest = node.name.partition("/")
        device = cast(str, node.device)  # a placed graph's nodes all have a device
        if top == "gradients":
            backward.setdefault(rest.partition("/")[0], {})[device] = None
        else:
            first.setdefault(top, device)
            if node.op == "variable":
                held.setdefault(top, device)
    return {**first, **held}, {layer: tuple(on) for layer, on in backward.items()}


def describe_cost(cost: CostModel) -> str:
    if isinstance(cost, StaticCostModel | CalibratedCostModel):
        return cost.describe()
    return type(cost).__name__
