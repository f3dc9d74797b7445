"""The graphs a model trains and evaluates with.

``build_training_graph`` lays out one training step as a single graph: placeholders for the
batch, the learning rate and the dropout seed; variable reads for the parameters; forward pass,
softmax cross-entropy, graph-to-graph gradients; and, optionally, the optimizer's in-place
updates. The result goes through the graph passes (prune drops, for instance, the gradient of
the input images that autodiff also produces).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from workbench.ir import Graph, GraphBuilder, gradients, ops
from workbench.models import ApplyContext, Sequential
from workbench.optim import Optimizer, emit_updates
from workbench.passes import PassReport, run_passes

INPUTS, LABELS, LEARNING_RATE, DROPOUT_SEED = "inputs", "labels", "learning_rate", "dropout_seed"


@dataclass(frozen=True)
class TrainingGraph:
    graph: Graph
    report: PassReport
    parameter_names: tuple[str, ...]


def _inputs(builder: GraphBuilder, model: Sequential, batch_size: int, dtype: str):
    input_dtype = "int64" if model.takes_integer_input else dtype
    x = builder.placeholder(INPUTS, (batch_size, *model.input_shape), input_dtype)
    y = builder.placeholder(LABELS, (batch_size,), "int64")
    return x, y


def _parameters(builder: GraphBuilder, model: Sequential, dtype: str):
    return {
        name: builder.variable(name, shape, dtype)
        for name, shape in model.parameter_shapes().items()
    }


def build_training_graph(
    model: Sequential,
    optimizer: Optimizer | None,
    batch_size: int,
    dtype: str,
) -> TrainingGraph:
    """One training step. Outputs: ``loss`` and, when ``optimizer`` is None, ``grad/<name>``
    for every parameter (strategies that reduce gradients before updating use that form)."""
    builder = GraphBuilder()
    x, y = _inputs(builder, model, batch_size, dtype)
    learning_rate = builder.placeholder(LEARNING_RATE, (), dtype) if optimizer else None
    seed = builder.placeholder(DROPOUT_SEED, (), "int64") if model.uses_dropout else None
    params = _parameters(builder, model, dtype)
    logits = model.apply(x, params, ApplyContext(training=True, dropout_seed=seed))
    loss = ops.softmax_cross_entropy(logits, y)
    grads = gradients(builder, loss, list(params.values()))
    outputs = {"loss": loss}
    if optimizer is None:
        outputs.update({gradient_name(name): grad for name, grad in zip(params, grads)})
    else:
        after = [loss.value.node, *(grad.value.node for grad in grads)]
        with builder.scope("update"):
            emit_updates(optimizer, params, grads, learning_rate, after)
    graph, report = run_passes(builder.build(outputs))
    return TrainingGraph(graph, report, tuple(params))


def build_evaluation_graph(model: Sequential, batch_size: int, dtype: str) -> Graph:
    """Inference: ``logits``, ``predictions`` (argmax), ``loss`` (mean cross-entropy)."""
    builder = GraphBuilder()
    x, y = _inputs(builder, model, batch_size, dtype)
    logits = model.apply(x, _parameters(builder, model, dtype), ApplyContext(training=False))
    outputs = {
        "logits": logits,
        "predictions": ops.argmax(logits, axis=-1),
        "loss": ops.softmax_cross_entropy(logits, y),
    }
    graph, _ = run_passes(builder.build(outputs))
    return graph


def gradient_name(parameter: str) -> str:
    return f"grad/{parameter}"


def build_update_graph(
    model: Sequential, optimizer: Optimizer, dtype: str, names: Sequence[str] | None = None
) -> Graph:
    """The optimizer step alone: gradients fed as ``grad/<name>`` placeholders (for strategies
    that reduce gradients between the backward pass and the update). ``names`` restricts it to
    some parameters (a parameter-server shard's)."""
    builder = GraphBuilder()
    learning_rate = builder.placeholder(LEARNING_RATE, (), dtype)
    params = _parameters(builder, model, dtype)
    if names is not None:
        params = {name: params[name] for name in names}
    grads = [builder.placeholder(gradient_name(name), params[name].shape, dtype) for name in params]
    with builder.scope("update"):
        emit_updates(optimizer, params, grads, learning_rate, after=[])
    graph, _ = run_passes(builder.build({}))
    return graph
