"""Each strategy's training step as simulator programs, mirroring what its devices really do
(the modules named in each builder's docstring), timed by a :class:`DeviceCosts`.

A builder returns :class:`StepPrograms`: the programs per device, the link model for the
simulator, and the devices that hold a replica's activations (for memory). Per-step costs
outside the programs (the client's dispatch, a step's overhead beyond its nodes) are added by
:mod:`workbench.planner.predict`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from workbench.costs import STAGE_HANDOFF
from workbench.ir import Graph, Node
from workbench.models import Sequential
from workbench.optim import Optimizer
from workbench.parallel.collectives import plan_buckets
from workbench.parallel.collectives.buckets import DEFAULT_BUCKET_BYTES, Bucket
from workbench.parallel.collectives.compression import CompressionSpec, parse_compression
from workbench.parallel.model_parallel.graph import build_model_parallel_graph
from workbench.parallel.parameter_server.partitioner import place_variables, shard_bytes
from workbench.parallel.pipeline.schedules import StageAction, make_schedule
from workbench.parallel.pipeline.stages import (
    INPUT_GRADIENT,
    StageGraphs,
    build_stage_graphs,
    split_backward,
    split_layers,
)
from workbench.parallel.tensor_parallel.graph import forward_graph, rank_training_graph
from workbench.parallel.tensor_parallel.plan import tensor_plan
from workbench.planner.compressed_buckets import bucket_exchange
from workbench.planner.device_costs import DeviceCosts
from workbench.planner.graph_segments import graph_seconds, node_actions, seconds_until
from workbench.planner.measured_collectives import measured_central_exchange
from workbench.planner.stragglers import straggler_factor
from workbench.simulate import (
    Action,
    Compute,
    Link,
    LinkModel,
    Recv,
    Send,
    Signal,
    Wait,
    pipeline_programs,
    push_pull,
    uniform,
)
from workbench.simulate.collectives import RingOptions, ring_allreduce_programs
from workbench.simulate.programs import MAIN
from workbench.training.graphs import build_training_graph, build_update_graph, gradient_name

COMMUNICATION = "communication"  # the replica's all-reduce thread
NO_COMPRESSION = parse_compression("none")
# Async parameter servers are simulated over several rounds: the steady state, where the
# shards serve one worker's push while the others compute, shows after the first.
ASYNC_ROUNDS = 4


@dataclass
class StepPrograms:
    programs: dict[str, list[Action]]
    link: LinkModel
    notes: list[str] = field(default_factory=list)
    stage_devices: tuple[str, ...] = ()  # a pipeline's, for its bubble
    rounds: int = 1  # steps the programs run (a step is their makespan over this)


def one_device_step(
    model: Sequential,
    optimizer: Optimizer,
    batch: int,
    dtype: str,
    device: str,
    costs,
    accumulate: int = 1,
    recompute: str = "none",
) -> StepPrograms:
    """``one-device`` (``strategies/one_device.py``): the whole training graph, in order;
    with ``--accumulate K``, K micro-steps of the gradient graph and one update
    (``training/accumulated_step.py``)."""
    if accumulate > 1:
        graph = build_training_graph(
            model, None, batch // accumulate, dtype, recompute=recompute
        ).graph
        update = build_update_graph(model, optimizer, dtype)
        computing = node_actions(graph, costs, device, lambda node: ())
        actions = accumulated(computing, computing, accumulate, _adding(model, dtype, costs))
        actions.append(Compute(graph_seconds(update, costs, device), "update", phase="update"))
        return StepPrograms({device: actions}, costs.peer_link)
    graph = build_training_graph(model, optimizer, batch, dtype, recompute=recompute).graph
    actions = node_actions(graph, costs, device, lambda node: (), _update_phase)
    return StepPrograms({device: actions}, costs.peer_link)


def accumulated(
    computing: list[Action], last: list[Action], accumulate: int, adding: Compute
) -> list[Action]:
    """``--accumulate K`` (``training/gradient_accumulation.py``): K-1 micro-steps
    (``computing``), each adding its gradients into the buffers (``adding``), then the last
    one (``last``: its gradients may start the exchange as they appear), whose own add is
    counted before it."""
    if accumulate == 1:
        return list(last)
    return [*([*computing, adding] * (accumulate - 1)), adding, *last]


def _adding(model: Sequential, dtype: str, costs: DeviceCosts) -> Compute:
    """One micro-step's gradients added into the accumulation buffers."""
    nbytes = sum(int(np.prod(shape)) for shape in model.parameter_shapes().values())
    nbytes *= np.dtype(dtype).itemsize
    return Compute(nbytes * costs.add_seconds_per_byte, "accumulate")


def _update_phase(node) -> str:
    return "update" if node.name.startswith("update/") else "compute"


@dataclass(frozen=True)
class ReplicaGraphs:
    """What a data-parallel replica's step runs: the gradient graph of one micro-step (its
    share of the batch over ``accumulate``), the update, and the gradients' buckets."""

    gradient: Graph
    update: Graph
    itemsize: int
    buckets: list[Bucket]


def replica_graphs(
    model: Sequential,
    optimizer: Optimizer,
    batch: int,
    dtype: str,
    replicas: int,
    bucket_bytes: int,
    accumulate: int,
    recompute: str,
) -> ReplicaGraphs:
    itemsize = np.dtype(dtype).itemsize
    micro = batch // replicas // accumulate
    return ReplicaGraphs(
        build_training_graph(model, None, micro, dtype, recompute=recompute).graph,
        build_update_graph(model, optimizer, dtype),
        itemsize,
        plan_buckets(model.parameter_shapes(), itemsize, bucket_bytes),
    )


def replica_computes(
    graph: Graph,
    costs: DeviceCosts,
    device: str,
    stretch: float,
    adding: Compute,
    accumulate: int,
    last_signals=None,
) -> list[Action]:
    """A replica's K micro-step computes (``stretch``: the straggler allowance), the last one
    signalling what ``last_signals(node)`` returns (the buckets it completes)."""
    computing = node_actions(graph, costs, device, lambda node: (), stretch=stretch)
    last = (
        computing
        if last_signals is None
        else node_actions(graph, costs, device, last_signals, stretch=stretch)
    )
    return accumulated(computing, last, accumulate, adding)


def mirrored_step(
    model: Sequential,
    optimizer: Optimizer,
    batch: int,
    dtype: str,
    devices: Sequence[str],
    costs: DeviceCosts,
    algorithm: str,
    groups: Sequence[Sequence[str]] | None,
    bucket_bytes: int,
    compression: CompressionSpec = NO_COMPRESSION,
    accumulate: int = 1,
    recompute: str = "none",
) -> StepPrograms:
    """``mirrored`` (``parallel/data_parallel/replica.py``): each replica runs backward on its
    share; when the last gradient of a bucket appears, the bucket goes to the communication
    thread, which all-reduces buckets one after another (through ``compression``'s codec,
    :mod:`workbench.planner.compressed_buckets`) while backward goes on; then the update.
    With ``--accumulate K`` the share is computed in K micro-steps, the buckets going out
    during the last."""
    replicas = len(devices)
    built = replica_graphs(
        model, optimizer, batch, dtype, replicas, bucket_bytes, accumulate, recompute
    )
    graph, update, itemsize, buckets = built.gradient, built.update, built.itemsize, built.buckets
    bucket_of = {name: index for index, b in enumerate(buckets) for name in b.names}
    producer = {graph.outputs[gradient_name(name)].node: name for name in model.parameter_shapes()}
    programs: dict[str, list[Action]] = {}
    stretch = straggler_factor(costs.variation(graph), replicas)
    adding = _adding(model, dtype, costs)
    first: list[Action] | None = None
    for device in devices:
        if first is not None:
            programs[device] = list(first)  # a described cluster's replicas are alike
            continue
        filled = {index: 0 for index in range(len(buckets))}
        order: list[int] = []

        def bucket_ready(node, filled=filled, order=order) -> list[Action]:
            name = producer.get(node.name)
            if name is None:
                return []
            index = bucket_of[name]
            filled[index] += 1
            if filled[index] < len(buckets[index].names):
                return []
            order.append(index)
            return [Signal(f"bucket{index}")]

        programs[device] = replica_computes(
            graph, costs, device, stretch, adding, accumulate, bucket_ready
        )
        if costs.cluster is not None:
            first = programs[device]
    communication: dict[str, list[Action]] = {device: [] for device in devices}
    for index in order:
        reduced = bucket_exchange(
            compression,
            buckets[index],
            devices,
            costs,
            algorithm,
            groups,
            itemsize,
            f"b{index}",
            COMMUNICATION,
        )
        for device in devices:
            communication[device] += [Wait(f"bucket{index}", COMMUNICATION), *reduced[device]]
    for device in devices:
        programs[device] += communication[device]
        programs[device] += [
            Signal("reduced", COMMUNICATION),
            Wait("reduced"),
            Compute(graph_seconds(update, costs, device), "update", phase="update"),
        ]
    # Every transfer of a mirrored step is a ring step (or reduce-to-one's, as loaded).
    return StepPrograms(programs, costs.ring_link if algorithm == "ring" else costs.peer_link)


def central_storage_step(
    model: Sequential,
    optimizer: Optimizer,
    batch: int,
    dtype: str,
    devices: Sequence[str],
    costs: DeviceCosts,
    bucket_bytes: int,
    accumulate: int = 1,
    recompute: str = "none",
) -> StepPrograms:
    """``central-storage`` (``replica.py`` ``_central_update``): every replica computes its
    gradients (in ``accumulate`` micro-steps), reduces them to rank 0 bucket by bucket, rank 0
    updates the only copy and broadcasts the new values."""
    replicas = len(devices)
    built = replica_graphs(
        model, optimizer, batch, dtype, replicas, bucket_bytes, accumulate, recompute
    )
    graph, update, itemsize, buckets = built.gradient, built.update, built.itemsize, built.buckets
    total = sum(b.size for b in buckets)
    reduce = costs.measured_collective("reduce", devices, None)
    broadcast = costs.measured_collective("broadcast", devices, None)
    if reduce is not None and broadcast is not None:
        exchange = measured_central_exchange(
            reduce,
            broadcast,
            [b.size * itemsize for b in buckets],
            graph_seconds(update, costs, devices[0]),
            devices,
            "central",
        )
    else:
        exchange = push_pull(
            list(devices),
            [devices[0]],
            total * itemsize,
            costs.add_seconds_per_byte,
            "central",
            update_seconds=graph_seconds(update, costs, devices[0]),
        )
    adding = _adding(model, dtype, costs)
    stretch = straggler_factor(costs.variation(graph), replicas)
    # A described cluster's replicas are alike: the first one's compute stands for all.
    alike = costs.cluster is not None
    first = replica_computes(graph, costs, devices[0], stretch, adding, accumulate)
    programs = {
        device: [
            *(
                first
                if alike
                else replica_computes(graph, costs, device, stretch, adding, accumulate)
            ),
            *exchange[device],
        ]
        for device in devices
    }
    return StepPrograms(programs, costs.peer_link)


def parameter_server_step(
    model: Sequential,
    optimizer: Optimizer,
    batch: int,
    dtype: str,
    workers: Sequence[str],
    shards: Sequence[str],
    costs: DeviceCosts,
    partition_min_bytes: int | None = None,
    synchronous: bool = True,
    accumulate: int = 1,
    recompute: str = "none",
) -> StepPrograms:
    """``parameter-server`` (``parallel/parameter_server/worker_loop.py``,
    ``shard_service.py``): each worker pulls every shard's variables (a message exchange per
    shard, in shard order), computes its gradients, pushes each shard its part (acknowledged
    once the shard has taken it). Sync: each shard, once every worker's push is in, sums them and
    applies the update, which the next step's pulls wait for (so every worker waits for the
    slowest). Async: a shard applies each push as it comes, answering pushes in turn, and no
    worker waits for another; a step is one push from each worker (the run counts an update
    per push, a step per ``workers`` updates), here one round of them.

    Where calibration timed the workers' pulls and pushes as they run them
    (``calibration/exchange_probe.py``), each is that time, the shards' answers
    free signals, and the gradients take as much longer as they did in that loop; otherwise
    each exchange is simulated on the ``rpc`` links, its payload unpacked by the receiver. With
    ``--accumulate K`` a worker computes K micro-steps between its pull and its push."""
    itemsize = np.dtype(dtype).itemsize
    graph = build_training_graph(
        model, None, batch // len(workers) // accumulate, dtype, recompute=recompute
    ).graph
    pieces = place_variables(model.parameter_shapes(), len(shards), itemsize, partition_min_bytes)
    held = shard_bytes(pieces, len(shards), itemsize)
    shard_names = [sorted({p.variable for p in pieces if p.shard == k}) for k in range(len(shards))]
    exchange = _ps_exchange(costs, workers, shards, held)
    programs: dict[str, list[Action]] = {device: [] for device in [*workers, *shards]}
    rounds = 1 if synchronous else ASYNC_ROUNDS
    # The slowest worker (sync), and the shards' answers to the others on the same cores
    # (as calibration timed the loop; 1 if it did not).
    stretch = straggler_factor(costs.variation(graph), len(workers) if synchronous else 1)
    stretch *= costs.stretch_beside("ps-exchange", [*workers, *shards])
    computing: list[Action] | None = None
    for worker in workers:
        # A described cluster's workers are alike: the first one's compute stands for all.
        if computing is None or costs.cluster is None:
            computing = node_actions(graph, costs, worker, lambda node: (), stretch=stretch)
            computing = accumulated(computing, computing, accumulate, _adding(model, dtype, costs))
        for turn in range(rounds):
            programs[worker] += [*exchange.pull(worker, turn), *computing]
            programs[worker] += exchange.push(worker, turn)
    for shard, nbytes, names in zip(shards, held, shard_names):
        update = build_update_graph(model, optimizer, dtype, names)
        update_seconds = graph_seconds(update, costs, shard)
        for worker in workers:
            programs[shard] += exchange.grant(shard, nbytes, worker, 0)
        for turn in range(rounds):
            for worker in workers:
                programs[shard] += exchange.take(shard, nbytes, worker, turn)
                programs[shard].append(
                    Compute(nbytes * costs.add_seconds_per_byte, "sum", phase="update")
                    if synchronous
                    else Compute(update_seconds, "update", phase="update")
                )
                programs[shard] += exchange.answer(shard, worker, turn)
                if not synchronous and turn + 1 < rounds:
                    # Async: this worker's next pull is answered at once, while the shard
                    # goes on with the other workers' pushes.
                    programs[shard] += exchange.grant(shard, nbytes, worker, turn + 1)
        if synchronous:
            programs[shard].append(Compute(update_seconds, "update", phase="update"))
    return StepPrograms(programs, exchange.link, rounds=rounds)


@dataclass(frozen=True)
class _PsExchange:
    """How a parameter-server step's RPCs become actions: ``pull``/``push`` on a worker,
    ``grant`` (a pull answered), ``take`` (a push received) and ``answer`` (its ack) on a
    shard."""

    costs: DeviceCosts
    shards: Sequence[str]
    held: Sequence[int]
    pull_seconds: float | None = None  # measured: a worker's pulls from every shard
    push_seconds: float | None = None

    @property
    def measured(self) -> bool:
        return self.pull_seconds is not None

    @property
    def link(self) -> LinkModel:
        # Measured, the messages only order the shards' work: their cost is in what was timed.
        return uniform(Link(0.0, math.inf)) if self.measured else self.costs.rpc_link

    def _unpack(self, source: str, target: str, nbytes: int, phase: str) -> Compute:
        # An RPC's payload is copied out of the socket and deserialised by the receiver: CPU
        # work on its host, as putting it on the wire was on the sender's.
        return Compute(self.costs.rpc_link(source, target).put_seconds(nbytes), "unpack", phase)

    def pull(self, worker: str, turn: int) -> list[Action]:
        granted = [Recv(shard, f"pull/{worker}/{turn}", phase="ps-pull") for shard in self.shards]
        if self.measured:
            return [*granted, Compute(self.pull_seconds, "pull", phase="ps-pull", cpu=False)]
        actions: list[Action] = []
        for recv, shard, nbytes in zip(granted, self.shards, self.held):
            actions += [recv, self._unpack(shard, worker, nbytes, "ps-pull")]
        return actions

    def push(self, worker: str, turn: int) -> list[Action]:
        if self.measured:
            pushed = Compute(self.push_seconds, "push", phase="ps-push", cpu=False)
            sent = [
                Send(shard, 0, f"push/{worker}/{turn}", phase="ps-push") for shard in self.shards
            ]
            return [pushed, *sent]
        actions: list[Action] = []
        for shard, nbytes in zip(self.shards, self.held):
            actions += [
                Send(shard, nbytes, f"push/{worker}/{turn}", phase="ps-push"),
                Recv(shard, f"ack/{worker}/{turn}", phase="ps-push"),
            ]
        return actions

    def grant(self, shard: str, nbytes: int, worker: str, turn: int) -> list[Action]:
        return [
            Send(worker, 0 if self.measured else nbytes, f"pull/{worker}/{turn}", phase="ps-pull")
        ]

    def take(self, shard: str, nbytes: int, worker: str, turn: int) -> list[Action]:
        taken = Recv(worker, f"push/{worker}/{turn}", phase="ps-push")
        if self.measured:
            return [taken]
        return [taken, self._unpack(worker, shard, nbytes, "ps-push")]

    def answer(self, shard: str, worker: str, turn: int) -> list[Action]:
        if self.measured:
            return []  # the worker's measured push included its ack
        return [Send(worker, 8, f"ack/{worker}/{turn}", phase="ps-push")]


def _ps_exchange(
    costs: DeviceCosts, workers: Sequence[str], shards: Sequence[str], held: Sequence[int]
) -> _PsExchange:
    devices = [*workers, *shards]
    pull = costs.measured_collective("ps-pull", devices)
    push = costs.measured_collective("ps-push", devices)
    if pull is None or push is None:
        return _PsExchange(costs, shards, held)
    return _PsExchange(
        costs,
        shards,
        held,
        pull_seconds=sum(pull.seconds(nbytes) for nbytes in held),
        push_seconds=sum(push.seconds(nbytes) for nbytes in held),
    )


def model_parallel_step(
    model: Sequential,
    optimizer: Optimizer,
    batch: int,
    dtype: str,
    devices: Sequence[str],
    costs: DeviceCosts,
    placement: str = "greedy",
    recompute: str = "none",
) -> StepPrograms:
    """``model-parallel`` (``parallel/model_parallel/device.py``): the graph placed as the run
    places it (``placement``, greedy by these same costs), each device running its
    partition's nodes in order; a Send puts its tensor on the link, a Recv waits for it."""
    plan = build_model_parallel_graph(
        model, optimizer, batch, dtype, devices, placement, costs, costs.source, recompute
    )
    programs = {}
    for device, partition in plan.partitioned.partitions.items():

        def transfers(node, partition=partition) -> list[Action]:
            if node.op == "send":
                nbytes = partition.type_of(node.inputs[0]).nbytes
                return [Send(node.attrs["target"], nbytes, node.attrs["key"])]
            if node.op == "recv":
                return [Recv(node.attrs["source"], node.attrs["key"])]
            return []

        programs[device] = node_actions(partition, costs, device, transfers, _update_phase)
    return StepPrograms(programs, costs.peer_link)


def tensor_parallel_step(
    model: Sequential,
    optimizer: Optimizer,
    batch: int,
    dtype: str,
    devices: Sequence[str],
    costs: DeviceCosts,
    recompute: str = "none",
) -> StepPrograms:
    """``tensor-parallel`` (``parallel/tensor_parallel/graph.py``, run by
    ``parallel/model_parallel/device.py``): each rank runs its split training graph in order
    on the whole batch, stopping at each ``all_reduce`` node for a ring all-reduce of that
    tensor over the tensor group (``StepCollectives``). The ranks' graphs differ only in
    which shard they hold, so rank 0's times every device's."""
    tp = len(devices)
    forward = forward_graph(model, batch, dtype)
    split = tensor_plan(model, tp)
    graph = rank_training_graph(model, optimizer, forward, split, 0, tp, devices, recompute)
    options = RingOptions(np.dtype(dtype).itemsize)
    rings = {
        node.name: ring_allreduce_programs(
            list(devices),
            node.types[0].nbytes,
            costs.add_seconds_per_byte,
            node.attrs["key"],
            options,
        )
        for node in graph.nodes_with_op("all_reduce")
    }
    programs: dict[str, list[Action]] = {}
    for device in devices:

        def reduced(node: Node, device: str = device) -> list[Action]:
            return rings[node.name][device] if node.name in rings else []

        programs[device] = node_actions(graph, costs, device, reduced, _update_phase)
    return StepPrograms(programs, costs.ring_link)


def pipeline_stages(
    model: Sequential,
    stages: int,
    micro: int,
    dtype: str,
    recompute: str,
    virtual_stages: int = 1,
) -> tuple[list[StageGraphs], list[int]]:
    """Each model chunk's graphs for micro-batches of ``micro`` rows (``stages x
    virtual_stages`` chunks, chunk k on device k mod stages), and the bytes of the activation
    each chunk but the last hands on (its gradient comes back the same size)."""
    itemsize = np.dtype(dtype).itemsize
    chunks = stages * virtual_stages
    layer_groups = split_layers(model, chunks)
    graphs = [
        build_stage_graphs(
            model,
            layers,
            micro,
            dtype,
            first=chunk == 0,
            last=chunk == chunks - 1,
            recompute=recompute,
        )
        for chunk, layers in enumerate(layer_groups)
    ]
    boundary = [
        int(np.prod((micro, *model.shapes[layers.stop]))) * itemsize for layers in layer_groups[:-1]
    ]
    return graphs, boundary


@dataclass(frozen=True)
class ChunkSeconds:
    """Per model chunk: its forward, its whole backward and the backward's input-gradient and
    weight-gradient halves (zero-bubble's I and W; the first chunk's I is empty), in seconds
    on its device."""

    forward: list[float]
    backward: list[float]
    input_grad: list[float]
    weight_grad: list[float]
    # How far into a whole backward its input gradient is ready (and sent back).
    input_grad_ready: list[float]

    def programs(
        self,
        devices: list[str],
        order: list[list[StageAction]],
        boundary: list[int],
        updates: list[float] | None = None,
        key: str = "s0",
    ) -> dict[str, list[Action]]:
        return pipeline_programs(
            devices,
            order,
            self.forward,
            self.backward,
            boundary,
            update_seconds=updates,
            key=key,
            input_grad_seconds=self.input_grad,
            weight_grad_seconds=self.weight_grad,
            input_grad_ready_seconds=self.input_grad_ready,
        )


def chunk_seconds(
    graphs: Sequence[StageGraphs], devices: Sequence[str], costs: DeviceCosts, split: bool
) -> ChunkSeconds:
    """Each chunk's graphs timed on ``devices[k mod len(devices)]``; the backward is cut into
    its halves (``workbench.parallel.pipeline.stages.split_backward``) only when ``split``
    (a zero-bubble schedule runs them), else each half is costed as half the backward."""
    on = [devices[k % len(devices)] for k in range(len(graphs))]
    forward = [graph_seconds(g.forward, costs, d) for g, d in zip(graphs, on)]
    backward = [graph_seconds(g.backward, costs, d) for g, d in zip(graphs, on)]
    ready = [
        seconds_until(g.backward, INPUT_GRADIENT, costs, d)
        if INPUT_GRADIENT in g.backward.outputs
        else whole
        for g, d, whole in zip(graphs, on, backward)
    ]
    if not split:
        halves = [b / 2 for b in backward]
        return ChunkSeconds(forward, backward, halves, halves, ready)
    cut = [split_backward(g.backward) for g in graphs]
    input_grad = [
        0.0 if c.input_gradient is None else graph_seconds(c.input_gradient, costs, d)
        for c, d in zip(cut, on)
    ]
    weight_grad = [graph_seconds(c.weight_gradient, costs, d) for c, d in zip(cut, on)]
    return ChunkSeconds(forward, backward, input_grad, weight_grad, ready)


def device_parameters(graphs: Sequence[StageGraphs], stages: int) -> list[list[str]]:
    """The parameters each of ``stages`` devices holds: those of its chunks."""
    return [
        [name for g in graphs[stage::stages] for name in g.parameter_names]
        for stage in range(stages)
    ]


def pipeline_step(
    model: Sequential,
    optimizer: Optimizer,
    batch: int,
    dtype: str,
    devices: Sequence[str],
    costs: DeviceCosts,
    microbatches: int,
    schedule: str,
    recompute: str = "none",
    virtual_stages: int = 1,
) -> StepPrograms:
    """``pipeline`` (``parallel/pipeline/stage_worker.py``): device s runs its schedule's
    actions (forward, backward or its halves, on each of its model chunks) of each
    micro-batch, receiving activations from the previous chunk and gradients from the next,
    then updates its layers."""
    stages = len(devices)
    chunks = virtual_stages if schedule == "interleaved-1f1b" else 1
    order = make_schedule(schedule, stages, microbatches, chunks)
    graphs, boundary = pipeline_stages(
        model, stages, batch // microbatches, dtype, recompute, chunks
    )
    seconds = chunk_seconds(graphs, devices, costs, split=schedule == "zero-bubble")
    updates = [
        graph_seconds(build_update_graph(model, optimizer, dtype, names), costs, d)
        for names, d in zip(device_parameters(graphs, stages), devices)
    ]
    programs = seconds.programs(list(devices), order, boundary, updates)
    return StepPrograms(programs, costs.peer_link, stage_devices=tuple(devices))


def hybrid_step(
    model: Sequential,
    optimizer: Optimizer,
    batch: int,
    dtype: str,
    devices: Sequence[str],
    costs: DeviceCosts,
    stages: int,
    microbatches: int,
    schedule: str,
    compression: CompressionSpec = NO_COMPRESSION,
    recompute: str = "none",
    virtual_stages: int = 1,
) -> StepPrograms:
    """``hybrid`` (``parallel/pipeline/stage_worker.py``): a pipeline per replica on a 2-D mesh
    (rank = replica x stages + stage), each replica through its slice of the batch; then each
    stage ring-all-reduces its gradients, bucket by bucket, with the same stage of every other
    replica, and updates."""
    replicas = len(devices) // stages
    micro = batch // replicas // microbatches
    itemsize = np.dtype(dtype).itemsize
    shapes = model.parameter_shapes()
    chunks = virtual_stages if schedule == "interleaved-1f1b" else 1
    order = make_schedule(schedule, stages, microbatches, chunks)
    # Every replica's stage s runs the same graphs: built once, timed on each device.
    graphs, boundary = pipeline_stages(model, stages, micro, dtype, recompute, chunks)
    stage_parameters = device_parameters(graphs, stages)
    update_graphs = [
        build_update_graph(model, optimizer, dtype, names) for names in stage_parameters
    ]
    programs: dict[str, list[Action]] = {}
    seconds = None
    for replica in range(replicas):
        mesh_row = list(devices[replica * stages : (replica + 1) * stages])
        if seconds is None or costs.cluster is None:  # a described cluster's rows are alike
            seconds = chunk_seconds(graphs, mesh_row, costs, split=schedule == "zero-bubble")
        programs.update(seconds.programs(mesh_row, order, boundary, key=f"r{replica}"))
    for stage in range(stages):
        group = [devices[replica * stages + stage] for replica in range(replicas)]
        stage_shapes = {name: shapes[name] for name in stage_parameters[stage]}
        buckets = plan_buckets(stage_shapes, itemsize, DEFAULT_BUCKET_BYTES)
        for index, bucket in enumerate(buckets):
            reduced = bucket_exchange(
                compression,
                bucket,
                group,
                costs,
                "ring",
                None,
                itemsize,
                f"s{stage}/dp{index}",
                MAIN,
            )
            for device in group:
                programs[device] += reduced[device]
        for device in group:
            update = graph_seconds(update_graphs[stage], costs, device)
            programs[device].append(Compute(update, "update", phase="update"))
    stage_of = {device: rank % stages for rank, device in enumerate(devices)}

    def mesh_link(source: str, destination: str) -> Link:
        # Along a replica: the stages' activations, as timed between busy stages where
        # calibration did (workbench.calibration.mesh_groups_probe); along a stage: its ring.
        if stage_of[source] == stage_of[destination]:
            return costs.ring_link(source, destination)
        handoff = costs.measured_collective(STAGE_HANDOFF, [source, destination])
        return handoff or costs.peer_link(source, destination)

    return StepPrograms(programs, mesh_link, stage_devices=tuple(devices[:stages]))
