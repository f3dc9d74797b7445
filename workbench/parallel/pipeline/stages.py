"""Splitting a model into pipeline stages, and each stage's forward and backward graphs.

Stages are contiguous runs of layers balanced by their backward-pass cost, estimated from the
parameter count (a proxy for FLOPs in dense layers; layers without parameters join a
neighbour): a layer costs its forward, its re-computed forward, its weight gradient and its
input gradient, except the model's first, which has no input gradient to compute (3/4 of the
others' cost per parameter). A stage's backward graph recomputes its
forward from the stashed stage input before differentiating — GPipe's re-materialisation — so
a stage keeps only its inputs between the forward and backward of a micro-batch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from workbench.ir import Graph, GraphBuilder, gradients, ops
from workbench.models import ApplyContext, Sequential
from workbench.passes import run_passes
from workbench.training.graphs import DROPOUT_SEED, LABELS, gradient_name

STAGE_INPUT, OUTPUT_GRADIENT, ACTIVATION, INPUT_GRADIENT = (
    "stage_input",
    "output_gradient",
    "activation",
    "input_gradient",
)


class StageError(ValueError):
    """More parts asked for than the model has layers; ``parts`` and ``layers`` say how many,
    so each caller can name its own flag (``--stages``, ``--devices``)."""

    def __init__(self, parts: int, layers: int) -> None:
        super().__init__(f"{parts} parts need at least as many layers; the model has {layers}")
        self.parts, self.layers = parts, layers


def split_layers(model: Sequential, stages: int) -> list[range]:
    """``stages`` contiguous layer ranges with estimated costs as even as possible.

    Examples
    --------
    >>> from workbench.models import mlp
    >>> [list(r) for r in split_layers(mlp((8,), 2, (16, 16, 16)), 2)]
    [[0, 1], [2, 3]]
    """
    count = len(model.layers)
    if stages > count:
        raise StageError(stages, count)
    weights: list[int] = []
    shapes = model.parameter_shapes()
    for layer in model.layers:
        own = [s for n, s in shapes.items() if n.startswith(layer.name + "/")]
        parameters = sum(int(np.prod(s)) for s in own)
        # Forward, re-computed forward, weight gradient, input gradient: 4 passes over the
        # weights, 3 before any layer with parameters (nothing below wants an input gradient).
        passes = 3 if not any(weights) else 4
        weights.append(max(1, parameters * passes) if parameters else 0)
    weights = [max(1, w) for w in weights]
    cumulative = np.cumsum(weights)
    total = cumulative[-1]
    bounds, start = [], 0
    for stage in range(1, stages):
        # The cut whose prefix is closest to stage/stages of the work, leaving room for the rest.
        target = total * stage / stages
        lowest, highest = start + 1, count - (stages - stage)
        cut = min(range(lowest, highest + 1), key=lambda c: abs(cumulative[c - 1] - target))
        bounds.append(range(start, cut))
        start = cut
    bounds.append(range(start, count))
    return bounds


@dataclass(frozen=True)
class StageGraphs:
    forward: Graph
    backward: Graph
    parameter_names: tuple[str, ...]


def build_stage_graphs(
    model: Sequential, layers: range, microbatch: int, dtype: str, first: bool, last: bool
) -> StageGraphs:
    names = tuple(model.parameter_names(layers))
    shapes = model.parameter_shapes()
    in_shape = model.shapes[layers.start]
    in_dtype = "int64" if first and model.takes_integer_input else dtype

    def forward_part(builder: GraphBuilder):
        x = builder.placeholder(STAGE_INPUT, (microbatch, *in_shape), in_dtype)
        params = {n: builder.variable(n, shapes[n], dtype) for n in names}
        seed = builder.placeholder(DROPOUT_SEED, (), "int64") if model.uses_dropout else None
        out = model.apply(x, params, ApplyContext(training=True, dropout_seed=seed), layers)
        return x, params, out

    builder = GraphBuilder()
    _, _, out = forward_part(builder)
    if last:
        labels = builder.placeholder(LABELS, (microbatch,), "int64")
        forward = builder.build({"loss": ops.softmax_cross_entropy(out, labels)})
    else:
        forward = builder.build({ACTIVATION: out})

    builder = GraphBuilder()
    x, params, out = forward_part(builder)
    if last:
        labels = builder.placeholder(LABELS, (microbatch,), "int64")
        objective = ops.softmax_cross_entropy(out, labels)
    else:
        # The vjp with the next stage's gradient: d(sum(out * g)) / d(inputs) = g^T J.
        incoming = builder.placeholder(OUTPUT_GRADIENT, out.shape, dtype)
        objective = ops.reduce_sum(out * incoming)
    wrt = [params[n] for n in names] + ([] if first else [x])
    results = gradients(builder, objective, wrt)
    outputs = {gradient_name(n): g for n, g in zip(names, results)}
    if not first:
        outputs[INPUT_GRADIENT] = results[-1]
    if last:
        outputs["loss"] = objective
    backward = builder.build(outputs)
    return StageGraphs(run_passes(forward)[0], run_passes(backward)[0], names)
