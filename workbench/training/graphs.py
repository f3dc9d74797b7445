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

from workbench.ir import Graph, GraphBuilder, Tensor, gradients, ops
from workbench.models import ApplyContext, Sequential
from workbench.optim import Optimizer, compute_copy_name, compute_dtype, emit_updates
from workbench.passes import PassReport, recompute_passes, run_passes

INPUTS, LABELS, LEARNING_RATE, DROPOUT_SEED = "inputs", "labels", "learning_rate", "dropout_seed"
# Mixed precision: the dynamic loss scale S, fed each step (a float32 scalar, a power of two).
LOSS_SCALE = "loss_scale"


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
    recompute: str = "none",
    precision: str = "fp32",
) -> TrainingGraph:
    """One training step. Outputs: ``loss`` and, when ``optimizer`` is None, ``grad/<name>``
    for every parameter (strategies that reduce gradients before updating use that form).
    ``recompute``: the ``--recompute`` policy, applied by the last pass
    (:mod:`workbench.passes.recompute`). ``precision`` mixed-fp16 / mixed-bf16: forward and
    backward in 16 bits (see :func:`_mixed_precision_backward`), fed ``loss_scale`` too."""
    builder = GraphBuilder()
    x, y = _inputs(builder, model, batch_size, dtype)
    learning_rate = builder.placeholder(LEARNING_RATE, (), dtype) if optimizer else None
    seed = builder.placeholder(DROPOUT_SEED, (), "int64") if model.uses_dropout else None
    params = _parameters(builder, model, dtype)
    half = compute_dtype(precision)
    if half is None:
        logits = model.apply(x, params, ApplyContext(training=True, dropout_seed=seed))
        loss = ops.softmax_cross_entropy(logits, y)
        grads = gradients(builder, loss, list(params.values()))
    else:
        loss, grads = _mixed_precision_backward(builder, model, (x, y), seed, params, half)
    outputs = {"loss": loss}
    if optimizer is None:
        outputs.update({gradient_name(name): grad for name, grad in zip(params, grads)})
    else:
        after = [loss.value.node, *(grad.value.node for grad in grads)]
        with builder.scope("update"):
            emit_updates(optimizer, params, grads, learning_rate, after, half)
    final = recompute_passes(recompute, [layer.name for layer in model.layers])
    graph, report = run_passes(builder.build(outputs), final=final)
    return TrainingGraph(graph, report, tuple(params))


def _mixed_precision_backward(
    builder: GraphBuilder,
    model: Sequential,
    batch: tuple[Tensor, Tensor],
    seed: Tensor | None,
    params: dict[str, Tensor],
    half: str,
) -> tuple[Tensor, list[Tensor]]:
    """The loss and the float32 gradients of the masters ``params``, computed in ``half``
    (docs/guide/command-line.md, "Mixed precision"): the forward pass reads the 16-bit copies
    and casts the inputs; the logits go back to float32 for the softmax cross-entropy (its
    log-sum-exp loses the loss in 16 bits); backward starts from the loss times the fed scale
    S, so small gradients do not flush to zero in 16 bits; each gradient is cast to float32
    and divided by S (exact: a power of two). An overflow stays inf or NaN through both, for
    the step to see and skip. The casts are nodes of the graph, as every other op."""
    x, y = batch
    master = next(iter(params.values())).dtype
    copies = {
        name: builder.variable(compute_copy_name(name), param.shape, half)
        for name, param in params.items()
    }
    scale = builder.placeholder(LOSS_SCALE, (), master)
    with builder.scope("mixed_precision"):
        inputs = x if model.takes_integer_input else ops.cast(x, half)
    logits = model.apply(inputs, copies, ApplyContext(training=True, dropout_seed=seed))
    with builder.scope("mixed_precision"):
        loss = ops.softmax_cross_entropy(ops.cast(logits, master), y)
        scaled = loss * scale
    scaled_gradients = gradients(builder, scaled, list(copies.values()))
    with builder.scope("mixed_precision"):
        unscaled = [ops.cast(gradient, master) / scale for gradient in scaled_gradients]
    return loss, unscaled


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
    model: Sequential,
    optimizer: Optimizer,
    dtype: str,
    names: Sequence[str] | None = None,
    precision: str = "fp32",
) -> Graph:
    """The optimizer step alone: gradients fed as ``grad/<name>`` placeholders (for strategies
    that reduce gradients between the backward pass and the update). ``names`` restricts it to
    some parameters (a parameter-server shard's). With a mixed ``precision`` each update of a
    float32 master is followed by the refresh of its 16-bit copy."""
    builder = GraphBuilder()
    learning_rate = builder.placeholder(LEARNING_RATE, (), dtype)
    params = _parameters(builder, model, dtype)
    if names is not None:
        params = {name: params[name] for name in names}
    grads = [builder.placeholder(gradient_name(name), params[name].shape, dtype) for name in params]
    with builder.scope("update"):
        emit_updates(optimizer, params, grads, learning_rate, [], compute_dtype(precision))
    graph, _ = run_passes(builder.build({}))
    return graph
