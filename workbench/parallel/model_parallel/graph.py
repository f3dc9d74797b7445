"""The model-parallel training graph: layers pinned to devices, then placed and partitioned.

By default the layers are split into contiguous, parameter-balanced groups, one per device
(each layer's variables and forward ops carry a device constraint, exactly as if the user had
written ``with workbench.device("/task:n")`` around it); the backward and loss nodes, which
autodiff creates unconstrained, are placed by the greedy cost model, and updates are
colocated with their variables. The partition pass then cuts the graph per device with
Send/Recv pairs on every crossing edge.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from workbench.ir import Graph, GraphBuilder, gradients, ops
from workbench.models import ApplyContext, Sequential
from workbench.optim import Optimizer, emit_updates
from workbench.parallel.pipeline.stages import split_layers
from workbench.passes import Partitioned, PlacementError, partition, place, run_passes
from workbench.passes.place import resolve_device
from workbench.training.graphs import DROPOUT_SEED, INPUTS, LABELS, LEARNING_RATE


@dataclass(frozen=True)
class ModelParallelPlan:
    placed: Graph
    partitioned: Partitioned
    layer_devices: tuple[tuple[str, str], ...]  # (layer, or tower, device)
    heading: str = "placement of layers:"

    def describe(self) -> str:
        lines = [self.heading]
        lines += [f"  {layer:<18} {device}" for layer, device in self.layer_devices]
        lines.append("partitions and Send/Recv pairs:")
        lines.append(self.partitioned.describe())
        return "\n".join(lines)


def build_model_parallel_graph(
    model: Sequential, optimizer: Optimizer, batch_size: int, dtype: str, devices: Sequence[str]
) -> ModelParallelPlan:
    if any(layer.device for layer in model.layers):
        # The user's constraints decide; unconstrained layers follow the layer before them.
        device_of_layer, current = {}, devices[0]
        for index, layer in enumerate(model.layers):
            if layer.device:
                try:
                    current = resolve_device(layer.device, devices)
                except PlacementError as error:
                    raise PlacementError(f"layer {layer.name}: {error}") from None
            device_of_layer[index] = current
    else:
        groups = split_layers(model, len(devices))
        device_of_layer = {i: devices[g] for g, layers in enumerate(groups) for i in layers}
    shapes = model.parameter_shapes()
    builder = GraphBuilder()
    input_dtype = "int64" if model.takes_integer_input else dtype
    with builder.device(devices[0]):
        x = builder.placeholder(INPUTS, (batch_size, *model.input_shape), input_dtype)
    seed = builder.placeholder(DROPOUT_SEED, (), "int64") if model.uses_dropout else None
    params = {}
    for index in range(len(model.layers)):
        with builder.device(device_of_layer[index]):
            for name in model.parameter_names(range(index, index + 1)):
                params[name] = builder.variable(name, shapes[name], dtype)
            x = model.apply(
                x, params, ApplyContext(training=True, dropout_seed=seed), range(index, index + 1)
            )
    with builder.device(devices[-1]):
        labels = builder.placeholder(LABELS, (batch_size,), "int64")
        loss = ops.softmax_cross_entropy(x, labels)
    ordered = {name: params[name] for name in shapes}
    grads = gradients(builder, loss, list(ordered.values()))
    learning_rate = builder.placeholder(LEARNING_RATE, (), dtype)
    after = [loss.value.node, *(grad.value.node for grad in grads)]
    with builder.scope("update"):
        emit_updates(optimizer, ordered, grads, learning_rate, after)
    graph, _ = run_passes(builder.build({"loss": loss}))
    placed = place(graph, list(devices))
    layer_devices = tuple((layer.name, device_of_layer[i]) for i, layer in enumerate(model.layers))
    return ModelParallelPlan(placed, partition(placed, list(devices)), layer_devices)
