"""A mesh step (``dp x tp x pp``, ``workbench/strategies/mesh.py``) as simulator programs.

Each stage's compute is its tensor rank's split graph (the stage graphs a mesh run builds,
``build_stage_graphs`` with ``split_for_rank`` as the forward rewrite), costed node by node; the
tensor group all-reduces each split pair's partial sums forward and its input's gradient
backward (the ``all_reduce`` nodes of the rank's forward and backward graphs, each of its
activation's bytes); the stages hand activations and gradients on as the schedule's actions
run; then every device all-reduces its shard's gradients with its data group and updates
(docs/guide/planning.md, "Searching the mesh").

Two ways to play it. Where devices share a host's cores (a local CPU cluster) every device
runs its own program, the tensor and data groups' all-reduces as rings of their own, so the
shared cores see every device at once. Elsewhere (GPUs, a described cluster) the replicas are
alike and so are the tensor ranks of a stage: one replica's pipeline is played, tensor rank 0
of each stage, its rings priced in closed form (:mod:`workbench.planner.mesh_rings`). Stage
graphs and their costs are kept per chunk in a :class:`MeshCosting`, shared by every
configuration a search predicts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from workbench.config import RunConfig
from workbench.costs import STAGE_HANDOFF, TENSOR_ALLREDUCE, estimate_bytes, estimate_flops
from workbench.ir import Graph
from workbench.ir.liveness import LiveBytes, live_bytes
from workbench.ir.memory import CATEGORIES
from workbench.models import Sequential
from workbench.optim import Optimizer
from workbench.parallel.mesh import MeshPoint, MeshShape
from workbench.parallel.pipeline.mesh_stage import stage_plans
from workbench.parallel.pipeline.schedules import BACKWARD, FORWARD, StageAction, make_schedule
from workbench.parallel.pipeline.stages import (
    ACTIVATION,
    INPUT_GRADIENT,
    OUTPUT_GRADIENT,
    STAGE_INPUT,
    build_stage_graphs,
    split_backward,
    split_layers,
)
from workbench.passes.tensor_split import REPLICATED, SplitPlan, shard_shape, split_for_rank
from workbench.planner.device_costs import DeviceCosts, RooflineCostModel
from workbench.planner.graph_segments import FREE_OPS
from workbench.planner.measured_collectives import measured_allreduce
from workbench.planner.mesh_rings import ring_seconds
from workbench.simulate import (
    Action,
    Compute,
    Link,
    LinkModel,
    Recv,
    RingOptions,
    Send,
    ring_allreduce_programs,
)
from workbench.strategies.mesh import mesh_of
from workbench.strategies.options import MeshOptions
from workbench.training.graphs import build_update_graph

# Every device gets its own program up to this many devices; beyond, one replica's pipeline.
PLAY_EVERY_DEVICE_UP_TO = 64
# Nodes that compute nothing here: sources, variables (resident) and the input mark of a
# split region (an identity); its all-reduces are collectives, costed as rings.
UNCOSTED_OPS = (*FREE_OPS, "variable", "tensor_input")
ALL_REDUCE = "all_reduce"
TENSOR, DATA = "tensor all-reduce", "data all-reduce"


@dataclass(frozen=True)
class GraphCost:
    """A graph's compute in runs between its tensor all-reduces: each segment's seconds, and
    the bytes all-reduced after it (0 after the last)."""

    segments: tuple[tuple[float, int], ...]

    @property
    def compute(self) -> float:
        return sum(seconds for seconds, _ in self.segments)

    @property
    def reduced(self) -> tuple[int, ...]:
        return tuple(nbytes for _, nbytes in self.segments if nbytes)


NOTHING = GraphCost(())


@dataclass(frozen=True)
class ChunkCost:
    """One model chunk on one tensor rank: its forward, backward and backward halves, what it
    hands on (activation forward, input gradient back), its shard's gradient bytes and its
    update's seconds."""

    forward: GraphCost
    backward: GraphCost
    input_gradient: GraphCost
    weight_gradient: GraphCost
    activation_bytes: int
    gradient_bytes: int
    shard_gradient_bytes: int
    update_seconds: float
    # Memory (bytes by category where a dict): the shard's parameters and optimizer slots;
    # what a micro-batch in flight keeps (its input and stash) and its input alone; the
    # forward's and the backward's own high-water beside that (the forward's holding the
    # stash it makes, the backward's without the stash it reads).
    parameter_bytes: int = 0
    optimizer_bytes: int = 0
    kept_bytes: int = 0
    input_bytes: int = 0
    forward_peak: dict[str, int] = field(default_factory=dict)
    backward_peak: dict[str, int] = field(default_factory=dict)
    # A whole backward up to its input gradient, which the stage sends back right then, and
    # the rest (the weight gradients); the first chunk's: all of it, then nothing.
    backward_until_sent: GraphCost = NOTHING
    backward_after_sent: GraphCost = NOTHING

    def of(self, kind: str) -> GraphCost:
        return {
            "F": self.forward,
            "B": self.backward,
            "I": self.input_gradient,
            "W": self.weight_gradient,
        }[kind]


@dataclass(frozen=True)
class _Figures:
    """What of a chunk's cost and memory depends on its micro-batch's rows, as arrays: per
    graph (forward, backward, input-gradient and weight-gradient halves) each node's figures
    (FLOPs and bytes for a roofline, else seconds), the segment each node is in and the bytes
    of each all-reduce; the activation, input gradient, kept and input bytes; the forward's and the
    backward's live bytes at each moment, by category. Every tensor has at most one batch
    axis, so each of these numbers is affine in the rows: figures at two sizes give them at
    any (:meth:`between`)."""

    nodes: tuple[np.ndarray, ...]
    segments: tuple[np.ndarray, ...]
    reduced: tuple[np.ndarray, ...]
    sizes: np.ndarray
    forward_moments: np.ndarray
    backward_moments: np.ndarray
    # The backward's costed nodes and all-reduces up to and including the one computing its
    # input gradient (all of them without one).
    ready_nodes: int = 0
    ready_reduced: int = 0

    def arrays(self) -> list[np.ndarray]:
        return [
            *self.nodes,
            *self.reduced,
            self.sizes,
            self.forward_moments,
            self.backward_moments,
        ]

    def alike(self, other: _Figures) -> bool:
        """Whether both come from graphs of one structure (only sizes differ)."""
        return (
            (self.ready_nodes, self.ready_reduced) == (other.ready_nodes, other.ready_reduced)
            and all(a.shape == b.shape for a, b in zip(self.arrays(), other.arrays()))
            and all(np.array_equal(a, b) for a, b in zip(self.segments, other.segments))
        )

    def between(self, other: _Figures, fraction: float) -> _Figures:
        """The figures ``fraction`` of the way from these to ``other`` (beyond, past 1)."""

        def at(a: np.ndarray, b: np.ndarray) -> np.ndarray:
            return a + (b - a) * fraction

        return _Figures(
            tuple(at(a, b) for a, b in zip(self.nodes, other.nodes)),
            self.segments,
            tuple(at(a, b) for a, b in zip(self.reduced, other.reduced)),
            at(self.sizes, other.sizes),
            at(self.forward_moments, other.forward_moments),
            at(self.backward_moments, other.backward_moments),
            self.ready_nodes,
            self.ready_reduced,
        )


# Two micro-batch sizes whose graphs give a chunk's figures at every size on a roofline.
PROBE_ROWS = (2, 4)


@dataclass
class MeshCosting:
    """Stage graphs and their costs, shared by every configuration of a search. On a
    described cluster (roofline costs, every device alike) a chunk's graphs are built at two
    micro-batch sizes and its figures at any size follow (:class:`_Figures`); with measured
    costs they are built at each size asked."""

    model: Sequential
    optimizer: Optimizer
    dtype: str
    costs: DeviceCosts
    recompute: str = "none"
    _chunks: dict = field(default_factory=dict, repr=False)
    _figures: dict = field(default_factory=dict, repr=False)
    _plans: dict = field(default_factory=dict, repr=False)
    _updates: dict = field(default_factory=dict, repr=False)
    _rings: dict = field(default_factory=dict, repr=False)
    _ranked: tuple[list[str], dict[str, int]] | None = field(default=None, repr=False)

    @property
    def itemsize(self) -> int:
        return np.dtype(self.dtype).itemsize

    @property
    def roofline(self) -> RooflineCostModel | None:
        model = self.costs.cost_model
        return model if isinstance(model, RooflineCostModel) else None

    def plan(self, tp: int, chunks: int) -> SplitPlan:
        """How every parameter splits over ``tp`` ranks with the model cut in ``chunks``:
        each chunk on its own, so a chunk's split depends on its layers alone."""
        key = (tp, chunks)
        if key not in self._plans:
            self._plans[key] = stage_plans(self.model, tp, chunks) if tp > 1 else {}
        return self._plans[key]

    def chunk(self, layers: range, tp: int, chunks: int, micro: int, device: str) -> ChunkCost:
        """Chunk ``layers`` of the model cut in ``chunks`` on tensor rank 0 of ``tp``, for
        micro-batches of ``micro`` rows."""
        alike = self.roofline is not None
        plan = self.plan(tp, chunks)
        if not any(plan.get(n, REPLICATED).axis is not None for n in self._names(layers)):
            # Nothing of the chunk splits: every rank runs it whole, as one device would.
            tp, plan = 1, {}
        key = (layers.start, layers.stop, tp, micro, "" if alike else device)
        found = self._chunks.get(key)
        if found is None:
            figures = self._scaled(layers, tp, plan, micro, device) if alike else None
            if figures is None:
                figures = self._measured(layers, tp, plan, micro, device)
            found = self._chunks[key] = self._cost(layers, tp, plan, figures, device)
        return found

    def _names(self, layers: range) -> list[str]:
        return self.model.parameter_names(layers)

    def _scaled(
        self, layers: range, tp: int, plan: SplitPlan, micro: int, device: str
    ) -> _Figures | None:
        key = (layers.start, layers.stop, tp)
        if key not in self._figures:
            low, high = (self._measured(layers, tp, plan, rows, device) for rows in PROBE_ROWS)
            self._figures[key] = (low, high) if low.alike(high) else None
        pair = self._figures[key]
        if pair is None:
            return None
        low, high = pair
        return low.between(high, (micro - PROBE_ROWS[0]) / (PROBE_ROWS[1] - PROBE_ROWS[0]))

    def _measured(
        self, layers: range, tp: int, plan: SplitPlan, micro: int, device: str
    ) -> _Figures:
        model = self.model
        first, last = layers.start == 0, layers.stop == len(model.layers)
        rewrite = None
        if tp > 1:
            group = tuple(f"tp{t}" for t in range(tp))

            def rewrite(graph: Graph) -> Graph:
                return split_for_rank(graph, plan, 0, tp, group)

        graphs = build_stage_graphs(
            model,
            layers,
            micro,
            self.dtype,
            first,
            last,
            recompute=self.recompute,
            forward_rewrite=rewrite,
        )
        halves = split_backward(graphs.backward)
        ready = _costed_until(graphs.backward, INPUT_GRADIENT)
        forward_walk = live_bytes(graphs.forward, external=(STAGE_INPUT,))
        stash = dict(
            buffer
            for key in graphs.stash
            if (buffer := forward_walk.fetched_buffers.get(key)) is not None
        )
        has_input = graphs.forward.has_node(STAGE_INPUT)
        fed = graphs.forward.node(STAGE_INPUT).types[0].nbytes if has_input else 0
        backward_walk = live_bytes(
            graphs.backward, external=(STAGE_INPUT, OUTPUT_GRADIENT, *graphs.stash)
        )
        measured = [
            self._graph_figures(graph, device)
            for graph in (
                graphs.forward,
                graphs.backward,
                halves.input_gradient,
                halves.weight_gradient,
            )
        ]
        return _Figures(
            nodes=tuple(m[0] for m in measured),
            segments=tuple(m[1] for m in measured),
            reduced=tuple(m[2] for m in measured),
            sizes=np.array(
                [
                    0 if last else _output_bytes(graphs.forward, ACTIVATION),
                    0 if first else _output_bytes(graphs.backward, INPUT_GRADIENT),
                    fed + sum(stash.values()),
                    fed,
                ],
                dtype=float,
            ),
            forward_moments=_moments(forward_walk),
            backward_moments=_moments(backward_walk),
            ready_nodes=ready[0],
            ready_reduced=ready[1],
        )

    def _graph_figures(
        self, graph: Graph | None, device: str
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each costed node's figures and segment, and each all-reduce's bytes."""
        roofline = self.roofline
        width = 1 if roofline is None else 2
        figures: list[tuple[float, ...]] = []
        segments: list[int] = []
        reduced: list[float] = []
        if graph is None:  # the first chunk's input-gradient half: nothing to compute
            graph = Graph(())
        for node in graph.nodes:
            if node.op in UNCOSTED_OPS:
                continue
            if node.op == ALL_REDUCE:
                reduced.append(graph.type_of(node.inputs[0]).nbytes)
                continue
            if roofline is None:
                figures.append((self.costs.node_seconds(graph, node, device),))
            else:
                figures.append((estimate_flops(graph, node), estimate_bytes(graph, node)))
            segments.append(len(reduced))
        return (
            np.array(figures, dtype=float).reshape(-1, width),
            np.array(segments, dtype=np.int64),
            np.array(reduced, dtype=float),
        )

    def _cost(
        self, layers: range, tp: int, plan: SplitPlan, figures: _Figures, device: str
    ) -> ChunkCost:
        names = self.model.parameter_names(layers)
        shapes = self.model.parameter_shapes()
        shard_shapes = {
            n: shard_shape(tuple(shapes[n]), plan.get(n, REPLICATED), tp) for n in names
        }
        shard = sum(int(np.prod(shape)) for shape in shard_shapes.values())
        whole = sum(int(np.prod(shapes[n])) for n in names)
        activation, gradient, kept, fed = (round(float(v)) for v in figures.sizes)
        costs = [
            self._graph_cost(nodes, segments, reduced)
            for nodes, segments, reduced in zip(figures.nodes, figures.segments, figures.reduced)
        ]
        # The whole backward cut right after the node computing its input gradient (which may
        # be an all-reduce joining the ranks' partial input gradients).
        ready, cut = figures.ready_nodes, figures.ready_reduced
        nodes, segments = figures.nodes[1], figures.segments[1]
        until_sent = self._graph_cost(nodes[:ready], segments[:ready], figures.reduced[1][:cut])
        after_sent = self._graph_cost(
            nodes[ready:], segments[ready:] - cut, figures.reduced[1][cut:]
        )
        return ChunkCost(
            forward=costs[0],
            backward=costs[1],
            input_gradient=costs[2],
            weight_gradient=costs[3],
            activation_bytes=activation,
            gradient_bytes=gradient,
            shard_gradient_bytes=shard * self.itemsize,
            # A shard's update does its share of the whole chunk's elementwise work.
            update_seconds=self.update_seconds(layers, device) * (shard / whole if whole else 0.0),
            parameter_bytes=shard * self.itemsize,
            optimizer_bytes=sum(self._slot_bytes(n, shape) for n, shape in shard_shapes.items()),
            kept_bytes=kept,
            input_bytes=fed,
            forward_peak=_largest(figures.forward_moments),
            backward_peak=_largest(figures.backward_moments),
            backward_until_sent=until_sent,
            backward_after_sent=after_sent,
        )

    def _graph_cost(
        self, nodes: np.ndarray, segments: np.ndarray, reduced: np.ndarray
    ) -> GraphCost:
        roofline = self.roofline
        if roofline is None:
            seconds = nodes[:, 0]
        else:
            seconds = roofline.kernel_seconds + np.maximum(
                nodes[:, 0] / roofline.flops_per_second,
                nodes[:, 1] / roofline.memory_bytes_per_second,
            )
        summed = np.bincount(segments, weights=seconds, minlength=len(reduced) + 1)
        sizes = [round(float(b)) for b in reduced] + [0]
        if not len(nodes) and not len(reduced):
            return NOTHING
        return GraphCost(tuple((float(t), b) for t, b in zip(summed, sizes)))

    def _slot_bytes(self, name: str, shape: tuple[int, ...]) -> int:
        """The optimizer's slots of a shard of ``shape``, asked of a two-element stand-in (a
        slot of the stand-in's size is a copy of the shard; any other keeps its own size)."""
        probe = np.zeros(2, self.dtype)
        return sum(
            int(np.prod(shape)) * slot.itemsize if slot.shape == probe.shape else slot.nbytes
            for slot in self.optimizer.slots(name, probe).values()
        )

    def update_seconds(self, layers: range, device: str) -> float:
        key = (layers.start, layers.stop, device)
        if key not in self._updates:
            names = self.model.parameter_names(layers)
            graph = build_update_graph(self.model, self.optimizer, self.dtype, names)
            self._updates[key] = sum(
                self.costs.node_seconds(graph, node, device)
                for node in graph.nodes
                if node.op not in FREE_OPS
            )
        return self._updates[key]

    def ranks(self, devices: Sequence[str]) -> dict[str, int]:
        """Each device's rank (its place in ``devices``), kept for the last list asked."""
        if self._ranked is None or self._ranked[0] != devices:
            self._ranked = (list(devices), {device: r for r, device in enumerate(devices)})
        return self._ranked[1]

    def ring(
        self, devices: Sequence[str], nbytes: int, link_of: LinkModel, kind: str = "ring"
    ) -> float:
        """A ring all-reduce's seconds over ``devices`` (kept per group and size): as
        calibration timed the group's ``kind`` (a data group's ``ring``, a tensor group's
        ``TENSOR_ALLREDUCE``) where it did, else its steps played on the links."""
        measured = self.costs.measured_collective(kind, devices)
        if measured is not None:
            return measured.seconds(nbytes)
        key = (tuple(devices), nbytes)
        if key not in self._rings:
            self._rings[key] = ring_seconds(
                devices, nbytes, self.itemsize, link_of, self.costs.add_seconds_per_byte
            )
        return self._rings[key]


@dataclass(frozen=True)
class MeshLayout:
    """A mesh configuration: its shape, the global batch, and its replicas' pipeline."""

    mesh: MeshShape
    batch: int
    microbatches: int
    schedule: str
    virtual_stages: int = 1

    @property
    def chunks_per_device(self) -> int:
        return self.virtual_stages if self.schedule == "interleaved-1f1b" else 1

    @property
    def chunk_count(self) -> int:
        return self.mesh.pp * self.chunks_per_device

    @property
    def micro(self) -> int:
        """A micro-batch's rows."""
        return self.batch // self.mesh.dp // self.microbatches

    def actions(self) -> list[list[StageAction]]:
        """Each stage's schedule (one stage: each micro-batch's forward then backward)."""
        if self.mesh.pp == 1:
            return [_no_pipeline(self.microbatches)]
        return make_schedule(self.schedule, self.mesh.pp, self.microbatches, self.virtual_stages)

    def device(self, devices: Sequence[str], replica: int, tensor: int, stage: int) -> str:
        return devices[self.mesh.rank(MeshPoint(replica, tensor, stage))]

    def chunk_costs(self, costing: MeshCosting, devices: Sequence[str]) -> list[list[ChunkCost]]:
        """Each stage's chunks (by local chunk: model chunk ``chunk * pp + stage``) on tensor
        rank 0 of replica 0."""
        stages = self.mesh.pp
        layer_chunks = split_layers(costing.model, self.chunk_count)
        return [
            [
                costing.chunk(
                    layer_chunks[c * stages + s],
                    self.mesh.tp,
                    self.chunk_count,
                    self.micro,
                    self.device(devices, 0, 0, s),
                )
                for c in range(self.chunks_per_device)
            ]
            for s in range(stages)
        ]


@dataclass(frozen=True)
class MeshStep:
    """A mesh step's programs and what the table splits out of it: per stage device (tensor
    rank 0 of replica 0), seconds in tensor all-reduces and in the data all-reduce."""

    programs: dict[str, list[Action]]
    link: LinkModel
    stage_devices: tuple[str, ...]
    tensor_seconds: dict[str, float]
    data_seconds: dict[str, float]
    played_every_device: bool
    # Bytes each played device sends in the rings priced in closed form (none when every
    # device plays its rings).
    closed_form_sent: dict[str, int] = field(default_factory=dict)


def mesh_step(
    costing: MeshCosting,
    layout: MeshLayout,
    devices: Sequence[str],
    every_device: bool | None = None,
) -> MeshStep:
    """One step of ``layout`` on ``devices`` (in rank order, ``rank = (replica * pp + stage)
    * tp + tensor``; see the module docstring; ``every_device``: play every device, default
    up to :data:`PLAY_EVERY_DEVICE_UP_TO`)."""
    costs = costing.costs
    mesh = layout.mesh
    every = _plays_every_device(costs, devices) if every_device is None else every_device
    stages, tp = mesh.pp, mesh.tp
    rank_of = costing.ranks(devices)

    def link(source: str, destination: str) -> Link:
        # Inside a tensor or data group: its ring; between stages: the hand-off, as timed
        # between busy stages where calibration did (as hybrid_step reads it).
        if rank_of[source] // tp % stages == rank_of[destination] // tp % stages:
            return costs.ring_link(source, destination)
        handoff = costs.measured_collective(STAGE_HANDOFF, [source, destination])
        return handoff or costs.peer_link(source, destination)

    chunk_costs = layout.chunk_costs(costing, devices)
    order = layout.actions()
    replicas = range(mesh.dp) if every else range(1)
    tensors = range(tp) if every else range(1)
    programs: dict[str, list[Action]] = {}
    tensor_seconds: dict[str, float] = {}
    data_seconds: dict[str, float] = {}
    sent: dict[str, int] = {}
    for replica in replicas:
        for tensor in tensors:

            def device_of(stage: int, replica: int = replica, tensor: int = tensor) -> str:
                return layout.device(devices, replica, tensor, stage)

            for stage in range(stages):
                device = device_of(stage)
                group = [layout.device(devices, replica, t, stage) for t in range(tp)]
                actions: list[Action] = []
                spent, ring_bytes = 0.0, 0
                for action in order[stage]:
                    more, seconds, nbytes = _action(
                        action,
                        chunk_costs[stage][action.chunk],
                        action.chunk * stages + stage,
                        layout.chunk_count,
                        stages,
                        device_of,
                        f"r{replica}t{tensor}",
                        f"r{replica}s{stage}",
                        group,
                        costing,
                        link,
                        every,
                    )
                    actions += more
                    spent += seconds
                    ring_bytes += nbytes
                data = [layout.device(devices, r, tensor, stage) for r in range(mesh.dp)]
                nbytes = sum(cost.shard_gradient_bytes for cost in chunk_costs[stage])
                key = f"s{stage}t{tensor}"
                actions += _data_allreduce(data, device, nbytes, costing, link, every, key)
                update = sum(cost.update_seconds for cost in chunk_costs[stage])
                actions.append(Compute(update, "update", phase="update"))
                programs[device] = actions
                if replica == 0 and tensor == 0:
                    tensor_seconds[device] = spent
                    data_seconds[device] = costing.ring(data, nbytes, link)
                if not every:
                    sent[device] = _ring_sent(tp, ring_bytes) + _ring_sent(mesh.dp, nbytes)
    return MeshStep(
        programs,
        link,
        tuple(layout.device(devices, 0, 0, s) for s in range(stages)),
        tensor_seconds,
        data_seconds,
        every,
        sent,
    )


def _ring_sent(size: int, nbytes: int) -> int:
    """What each rank of a ring all-reduce of ``nbytes`` sends: 2(n - 1) chunks of 1/n."""
    return 0 if size < 2 else 2 * (size - 1) * nbytes // size


def _plays_every_device(costs: DeviceCosts, devices: Sequence[str]) -> bool:
    """Every device plays its own program where devices share a host's cores (each one's
    work slows the others'), up to :data:`PLAY_EVERY_DEVICE_UP_TO`; elsewhere the replicas
    and tensor ranks are alike and one pipeline stands for all."""
    return bool(costs.host_cores) and len(devices) <= PLAY_EVERY_DEVICE_UP_TO


def mesh_layout(config: RunConfig) -> MeshLayout:
    """The layout a ``mesh`` run's options describe."""
    options = config.options_of(MeshOptions)
    return MeshLayout(
        mesh_of(config),
        config.batch_size,
        options.microbatches,
        options.schedule,
        options.virtual_stages,
    )


def _no_pipeline(microbatches: int) -> list[StageAction]:
    """One stage: each micro-batch's forward then backward, the gradients summed."""
    return [
        action
        for m in range(microbatches)
        for action in (StageAction(FORWARD, m), StageAction(BACKWARD, m))
    ]


def _output_bytes(graph: Graph, name: str) -> int:
    return graph.type_of(graph.outputs[name]).nbytes


def _moments(walk: LiveBytes) -> np.ndarray:
    """A walk's live bytes at each moment, one column per category."""
    moments = [walk.at_start, *(held for _, held in walk.after)]
    return np.array([[held.get(c, 0) for c in CATEGORIES] for held in moments], dtype=float)


def _largest(moments: np.ndarray) -> dict[str, int]:
    """The moment holding the most, by category."""
    if not len(moments):
        return {}
    worst = moments[int(np.argmax(moments.sum(axis=1)))]
    return {c: round(float(v)) for c, v in zip(CATEGORIES, worst)}


def _action(
    action: StageAction,
    cost: ChunkCost,
    model_chunk: int,
    chunk_count: int,
    stages: int,
    device_of: Callable[[int], str],
    key: str,
    ring_key: str,
    group: list[str],
    costing: MeshCosting,
    link: LinkModel,
    every: bool,
) -> tuple[list[Action], float, int]:
    """The actions of one schedule action on one device, its seconds in tensor all-reduces
    and the bytes they reduce: receive what it needs, compute between its all-reduces, send
    what the next needs (model chunk k's neighbours live on devices (k - 1) % pp and
    (k + 1) % pp)."""
    m, kind = action.microbatch, action.kind
    here = device_of(model_chunk % stages)
    actions: list[Action] = []
    if kind == "F" and model_chunk > 0:
        actions.append(Recv(device_of((model_chunk - 1) % stages), f"{key}/a{model_chunk}/{m}"))
    if kind in ("B", "I") and model_chunk < chunk_count - 1:
        actions.append(Recv(device_of((model_chunk + 1) % stages), f"{key}/g{model_chunk}/{m}"))
    label = str(action)
    # A whole backward sends its input gradient once computed, before its weight gradients.
    sends_back = kind in ("B", "I") and model_chunk > 0
    parts = (
        [cost.backward_until_sent, cost.backward_after_sent]
        if kind == "B" and sends_back
        else [cost.of(kind)]
    )
    spent, reduced, index = 0.0, 0, 0
    for part, graph in enumerate(parts):
        if part == 1:
            actions.append(_send_back(cost, model_chunk, m, stages, device_of, key))
        for seconds, nbytes in graph.segments:
            if seconds > 0:
                actions.append(Compute(seconds, label))
            if not nbytes:
                continue
            ring_time = costing.ring(group, nbytes, link, TENSOR_ALLREDUCE)
            spent += ring_time
            reduced += nbytes
            if every and len(group) > 1:
                actions += _group_allreduce(
                    group, here, nbytes, costing, TENSOR_ALLREDUCE, f"{ring_key}/{label}/tp{index}"
                )
            else:
                actions.append(Compute(ring_time, TENSOR, phase="allreduce", cpu=False))
            index += 1
    if kind == "F" and model_chunk < chunk_count - 1:
        target = device_of((model_chunk + 1) % stages)
        actions.append(Send(target, cost.activation_bytes, f"{key}/a{model_chunk + 1}/{m}"))
    if kind == "I" and sends_back:
        actions.append(_send_back(cost, model_chunk, m, stages, device_of, key))
    return actions, spent, reduced


def _send_back(
    cost: ChunkCost,
    model_chunk: int,
    m: int,
    stages: int,
    device_of: Callable[[int], str],
    key: str,
) -> Send:
    """The input gradient of micro-batch ``m``, to the device of the chunk before."""
    target = device_of((model_chunk - 1) % stages)
    return Send(target, cost.gradient_bytes, f"{key}/g{model_chunk - 1}/{m}")


def _costed_until(graph: Graph, output: str) -> tuple[int, int]:
    """How many of ``graph``'s costed nodes and of its all-reduces run up to and including
    the node computing its ``output`` (all of them where the graph has no such output)."""
    producer = graph.outputs[output].node if output in graph.outputs else None
    nodes = reduced = 0
    for node in graph.nodes:
        if node.op == ALL_REDUCE:
            reduced += 1
        elif node.op not in UNCOSTED_OPS:
            nodes += 1
        if node.name == producer:
            break
    return nodes, reduced


def _data_allreduce(
    group: list[str],
    device: str,
    nbytes: int,
    costing: MeshCosting,
    link: LinkModel,
    every: bool,
    key: str,
) -> list[Action]:
    """``device``'s part of its data group's all-reduce of a stage's shard gradients: a ring
    of its own when every device plays, else its closed-form time."""
    if len(group) < 2 or nbytes == 0:
        return []
    if every:
        return _group_allreduce(group, device, nbytes, costing, "ring", f"dp/{key}")
    seconds = costing.ring(group, nbytes, link)
    return [Compute(seconds, DATA, phase="allreduce", cpu=False)]


def _group_allreduce(
    group: list[str], device: str, nbytes: int, costing: MeshCosting, kind: str, key: str
) -> list[Action]:
    """``device``'s part of its group's all-reduce of ``nbytes`` when every device plays:
    the group meets and spends the time calibration measured for its ``kind`` where it did
    (as the mesh's devices run it: waits for cores included), else the ring's steps on the
    links."""
    measured = costing.costs.measured_collective(kind, group)
    if measured is not None:
        return measured_allreduce(measured, nbytes, group, key, phase="allreduce")[device]
    return ring_allreduce_programs(
        group,
        nbytes,
        costing.costs.add_seconds_per_byte,
        key,
        RingOptions(itemsize=costing.itemsize),
    )[device]
