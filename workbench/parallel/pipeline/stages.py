"""Splitting a model into pipeline stages, and each stage's forward and backward graphs.

Stages are contiguous runs of layers balanced by their backward-pass cost, estimated from the
parameter count (a proxy for FLOPs in dense layers; layers without parameters join a
neighbour): a layer costs its forward, its re-computed forward (counted whatever
``--recompute`` says, so the split is the same for every policy), its weight gradient and its
input gradient, except the model's first, which has no input gradient to compute (3/4 of the
others' cost per parameter).

A stage's forward and backward graphs are cut from one training graph of its layers (forward,
then autodiff's backward), rewritten first by ``--recompute``
(:mod:`workbench.passes.recompute`): the forward graph computes what the next stage (or the
loss) needs and hands back every other forward value the backward reads (its *stash*, kept
per in-flight micro-batch until that micro-batch's backward); the backward graph takes the
stash, the stage input and the gradient from the next stage. With ``--recompute none`` the
stash is every activation the backward reads; with ``full`` only the layers' boundaries, the
rest recomputed in backward (GPipe's re-materialisation, per layer)
(docs/guide/command-line.md, "Activation recomputation").

Interleaved 1F1B splits the model into ``stages x virtual_stages`` chunks and gives device
``s`` the model chunks ``s, s + P, s + 2P, ...`` (Megatron's interleaving): its local chunk
``c`` is model chunk ``c * P + s`` (:func:`chunk_layers`). Zero-bubble (ZB-H1) splits a
chunk's backward in two (:func:`split_backward`): the input-gradient half ``I`` (what the
previous chunk waits for) and the weight-gradient half ``W`` (run later, in the bubble),
cut from the same backward graph, so that ``I`` then ``W`` computes exactly what ``B`` does
(docs/guide/command-line.md, "Pipeline schedules").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from workbench.ir import Graph, GraphBuilder, Node, Value, gradients, ops
from workbench.models import ApplyContext, Sequential
from workbench.passes import extract, prune, recompute_layers, recompute_passes, run_passes
from workbench.training.graphs import DROPOUT_SEED, LABELS, gradient_name

STAGE_INPUT, OUTPUT_GRADIENT, ACTIVATION, INPUT_GRADIENT = (
    "stage_input",
    "output_gradient",
    "activation",
    "input_gradient",
)
# The forward values a stage's backward reads are handed over under ``stash/<node>/<index>``.
STASH = "stash"
# The backward values a chunk's input-gradient half computes and its weight-gradient half reads
# again are handed over under ``kept/<node>/<index>`` (kept from ``I`` until ``W``).
KEPT = "kept"
# The objective's output name in a graph handed to a forward rewrite.
_OBJECTIVE = "objective"
# Read again in backward from where they are (fed, constant or the device's variables).
_SOURCES = ("placeholder", "constant", "variable")


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


def chunk_layers(model: Sequential, stages: int, virtual_stages: int, stage: int) -> list[range]:
    """The layers of device ``stage``'s chunks, by local chunk: the model split into
    ``stages x virtual_stages`` chunks, local chunk ``c`` being model chunk
    ``c * stages + stage`` (so that each micro-batch visits every device ``virtual_stages``
    times, Megatron's interleaving). One virtual stage is the plain split.

    Examples
    --------
    >>> from workbench.models import mlp
    >>> model = mlp((8,), 2, (16, 16, 16))
    >>> [[list(r) for r in chunk_layers(model, 2, 2, stage)] for stage in (0, 1)]
    [[[0], [2]], [[1], [3]]]
    """
    chunks = split_layers(model, stages * virtual_stages)
    return [chunks[chunk * stages + stage] for chunk in range(virtual_stages)]


def chunks_per_device(schedule: str, virtual_stages: int) -> int:
    """The model chunks a device holds: ``--virtual-stages`` under interleaved-1f1b, the only
    schedule that interleaves; one under the others."""
    return virtual_stages if schedule == "interleaved-1f1b" else 1


@dataclass(frozen=True)
class StageGraphs:
    forward: Graph
    backward: Graph
    parameter_names: tuple[str, ...]
    # The forward outputs the backward takes as feeds of the same names (kept in between).
    stash: tuple[str, ...] = ()


def build_stage_graphs(
    model: Sequential,
    layers: range,
    microbatch: int,
    dtype: str,
    first: bool,
    last: bool,
    recompute: str = "none",
    forward_rewrite: Callable[[Graph], Graph] | None = None,
) -> StageGraphs:
    """The stage's forward and backward graphs for micro-batches of ``microbatch`` rows, cut
    from one training graph of ``layers`` rewritten by the ``recompute`` policy (see the
    module docstring).

    ``forward_rewrite``, if given, rewrites the stage's forward graph (its placeholders,
    variables, forward ops and objective, before autodiff), keeping the names of its
    placeholders, variables and outputs: a tensor-parallel rank's split of the stage
    (:mod:`workbench.passes.tensor_split`), whose variables have their shards' shapes.

    Examples
    --------
    >>> from workbench.models import mlp
    >>> model = mlp((8,), 2, (16, 16))
    >>> kept = build_stage_graphs(model, range(0, 2), 4, "float64", True, False)
    >>> kept.stash
    ('stash/dense_0/add/0', 'stash/dense_0/relu/0', 'stash/dense_1/add/0')
    >>> build_stage_graphs(model, range(0, 2), 4, "float64", True, False, "full").stash
    ('stash/dense_0/relu/0',)
    """
    names = tuple(model.parameter_names(layers))
    shapes = model.parameter_shapes()
    in_shape = model.shapes[layers.start]
    in_dtype = "int64" if first and model.takes_integer_input else dtype

    builder = GraphBuilder()
    x = builder.placeholder(STAGE_INPUT, (microbatch, *in_shape), in_dtype)
    params = {n: builder.variable(n, shapes[n], dtype) for n in names}
    seed = builder.placeholder(DROPOUT_SEED, (), "int64") if model.uses_dropout else None
    out = model.apply(x, params, ApplyContext(training=True, dropout_seed=seed), layers)
    if last:
        labels = builder.placeholder(LABELS, (microbatch,), "int64")
        objective = ops.softmax_cross_entropy(out, labels)
        ahead = {"loss": objective}
    else:
        ahead = {ACTIVATION: out}
        # The vjp with the next stage's gradient: d(sum(out * g)) / d(inputs) = g^T J.
        incoming = builder.placeholder(OUTPUT_GRADIENT, out.shape, dtype)
        objective = ops.reduce_sum(out * incoming)
    if forward_rewrite is not None:
        rewritten = forward_rewrite(builder.build({**ahead, _OBJECTIVE: objective}))
        builder = GraphBuilder(rewritten)
        x = builder.tensor(Value(STAGE_INPUT))
        params = {n: builder.tensor(Value(n)) for n in names}
        objective = builder.tensor(rewritten.outputs[_OBJECTIVE])
        ahead = {key: builder.tensor(rewritten.outputs[key]) for key in ahead}
    wrt = [params[n] for n in names] + ([] if first else [x])
    results = gradients(builder, objective, wrt)
    behind = {gradient_name(n): g for n, g in zip(names, results)}
    if not first:
        behind[INPUT_GRADIENT] = results[-1]
    everything = {**ahead, **behind}
    # Validated against the whole model; this stage recomputes those of its own layers.
    chosen = recompute_layers(recompute, [layer.name for layer in model.layers])
    own = [model.layers[i].name for i in layers]
    policy = ",".join(name for name in own if name in chosen) or "none"
    graph, _ = run_passes(builder.build(everything), final=recompute_passes(policy, own))
    forward, backward, stash = _cut(graph, tuple(ahead), tuple(behind))
    return StageGraphs(forward, input_gradient_first(backward), names, stash)


def input_gradient_first(backward: Graph) -> Graph:
    """``backward`` with every node its input gradient needs ahead of the others: the
    previous stage's backward waits for that gradient, which the stage sends as soon as it is
    computed, while the weight gradients wait for nothing. The same nodes run on the same
    inputs, so the gradients are the same bit for bit; only when the input gradient is ready
    changes (the order ``split_backward``'s ``I`` then ``W`` runs, in one program).

    Examples
    --------
    >>> from workbench.models import mlp
    >>> model = mlp((8,), 2, (16, 16))
    >>> graphs = build_stage_graphs(model, range(1, 3), 4, "float64", False, True)
    >>> computed = [n.name for n in graphs.backward.nodes if n.op == "matmul"]
    >>> # The second product: the first carries the gradient back through the last layer.
    >>> computed.index(graphs.backward.outputs[INPUT_GRADIENT].node)
    1
    """
    if INPUT_GRADIENT not in backward.outputs:
        return backward
    needed = extract(backward, [backward.outputs[INPUT_GRADIENT].node]).nodes
    names = {node.name for node in needed}
    return backward.with_nodes([*needed, *(n for n in backward.nodes if n.name not in names)])


@dataclass(frozen=True)
class SplitBackward:
    """A chunk's backward in two halves (zero-bubble's ``I`` and ``W``). ``input_gradient``
    computes the chunk's input gradient and hands over ``kept`` (the backward values the
    weight half reads again); ``weight_gradient`` takes the backward's feeds it still reads
    plus ``kept`` and computes the parameter gradients. On the model's first chunk there is
    no input gradient: ``input_gradient`` is None and ``weight_gradient`` is the whole
    backward."""

    input_gradient: Graph | None
    weight_gradient: Graph
    kept: tuple[str, ...] = ()


def split_backward(backward: Graph) -> SplitBackward:
    """Cut a stage backward graph (:func:`build_stage_graphs`) into its input-gradient and
    weight-gradient halves: ``I`` is every node the input gradient needs, ``W`` the rest,
    reading the ``I`` values it needs as ``kept`` feeds. Each node runs once, in one half or
    the other, on the same inputs as in the whole backward, so ``I`` then ``W`` computes
    bit for bit what the backward computes. Under ``--recompute`` a recomputed forward value
    is recomputed in ``I`` when the input gradient needs it (and kept for ``W`` if ``W`` reads
    it too), in ``W`` otherwise: nothing is recomputed twice.

    Examples
    --------
    >>> from workbench.models import mlp
    >>> model = mlp((8,), 2, (16, 16))
    >>> graphs = build_stage_graphs(model, range(1, 3), 4, "float64", False, True)
    >>> halves = split_backward(graphs.backward)
    >>> halves.kept  # the cotangents of the logits and of dense_1's pre-activation
    ('kept/gradients/softmax_cross_entropy/mul_1/0', 'kept/gradients/dense_1/relu/relu_grad/0')
    >>> sorted(halves.weight_gradient.outputs)
    ['grad/dense_1/bias', 'grad/dense_1/kernel', 'grad/dense_2/bias', 'grad/dense_2/kernel']
    >>> first = build_stage_graphs(model, range(0, 1), 4, "float64", True, False)
    >>> split_backward(first.backward).input_gradient is None
    True
    """
    if INPUT_GRADIENT not in backward.outputs:
        return SplitBackward(None, backward)
    weights = tuple(key for key in backward.outputs if key != INPUT_GRADIENT)
    first, rest, kept = _cut(backward, (INPUT_GRADIENT,), weights, KEPT)
    return SplitBackward(first, rest, kept)


def _cut(
    graph: Graph, ahead: tuple[str, ...], behind: tuple[str, ...], prefix: str = STASH
) -> tuple:
    """(first, rest, handed keys): the nodes the outputs ``ahead`` need, then the rest, with
    each value of the first that the rest reads (or outputs) handed over as a feed named
    ``<prefix>/<node>/<index>`` (sources are read again where they are)."""
    forward = extract(graph, [graph.outputs[key].node for key in ahead])
    done = {node.name for node in forward.nodes}
    handed: dict[Value, Value] = {}
    copied: dict[str, Node] = {}

    def read(value: Value) -> Value:
        """``value`` as the rest reads it: itself, a source copied over, or a handed feed."""
        if value.node not in done:
            return value
        source = graph.node(value.node)
        if source.op in _SOURCES:
            copied.setdefault(source.name, source)
        elif value not in handed:
            name = f"{prefix}/{value.node}/{value.index}"
            handed[value] = Value(name)
            kind = graph.type_of(value)
            attrs = {"shape": kind.shape, "dtype": kind.dtype}
            copied[name] = Node(name, "placeholder", (), attrs, (kind,))
        return handed.get(value, value)

    nodes: list[Node] = []
    for node in graph.nodes:
        if node.name in done:
            continue
        inputs = tuple(read(value) for value in node.inputs)
        # The first part has run before any node of the rest: nothing to wait for there.
        waits = tuple(name for name in node.control_inputs if name not in done)
        nodes.append(node.replace(inputs=inputs, control_inputs=waits))
    outputs = {key: read(graph.outputs[key]) for key in behind}
    order = {node.name: position for position, node in enumerate(graph.nodes)}
    ordered = sorted(handed, key=lambda value: (order[value.node], value.index))
    stash = {handed[value].node: value for value in ordered}
    forward = Graph(forward.nodes, {**{k: graph.outputs[k] for k in ahead}, **stash})
    backward = Graph((*copied.values(), *nodes), outputs)
    return forward, prune(backward), tuple(stash)
