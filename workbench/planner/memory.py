"""Each device's predicted peak memory under a configuration, by category.

A device's peak is what it keeps between steps (its parameters and optimizer state) plus the
most a step holds on top at one moment: the live values of the graphs it runs, walked node by
node by :mod:`workbench.ir.liveness` with the interpreter's own rules, and the buffers its
exchange keeps beside them (packed gradient buckets, pulled variables, pushed gradients, a
pipeline stage's stashed micro-batches). Categories are those a run's ledger measures
(:data:`workbench.ir.memory.CATEGORIES`); docs/guide/planning.md, "Memory per device", gives
each strategy's terms.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.config import RunConfig
from workbench.ir import Graph
from workbench.ir.interpreter import GRADIENT_PREFIX
from workbench.ir.liveness import LiveBytes, live_bytes
from workbench.ir.memory import CATEGORIES
from workbench.models import Sequential
from workbench.optim import Optimizer, compute_dtype
from workbench.parallel.collectives import plan_buckets
from workbench.parallel.collectives.buckets import DEFAULT_BUCKET_BYTES, Bucket
from workbench.parallel.data_parallel.gathered_reads import BACKWARD, gathered_reads
from workbench.parallel.data_parallel.sharded_replica import shard_update_graph
from workbench.parallel.data_parallel.shards import ShardLayout
from workbench.parallel.model_parallel.graph import build_model_parallel_graph
from workbench.parallel.parameter_server.client_graph import build_parameter_server_graph
from workbench.parallel.parameter_server.partitioner import place_variables
from workbench.parallel.pipeline.schedules import (
    FORWARD,
    INPUT_GRAD,
    WEIGHT_GRAD,
    make_schedule,
)
from workbench.parallel.pipeline.stages import (
    ACTIVATION,
    INPUT_GRADIENT,
    OUTPUT_GRADIENT,
    STAGE_INPUT,
    build_stage_graphs,
    split_layers,
)
from workbench.planner.device_costs import DeviceCosts
from workbench.strategies import STRATEGIES
from workbench.strategies.data_parallel import DataParallel
from workbench.strategies.options import (
    DataParallelOptions,
    HybridOptions,
    ModelParallelOptions,
    ParameterServerOptions,
    PipelineOptions,
)
from workbench.training.graphs import (
    INPUTS,
    LABELS,
    build_training_graph,
    build_update_graph,
    gradient_name,
)

# Mixed precision computes in 16 bits (float16 and bfloat16 alike).
HALF = "float16"
DATA_PARALLEL = ("mirrored", "multi-worker-mirrored", "central-storage")


@dataclass(frozen=True)
class DeviceMemory:
    """A device's predicted peak: ``total`` bytes at its worst moment, split by category
    (``by_category`` holds every category of :data:`CATEGORIES` and sums to ``total``)."""

    total: int
    by_category: dict[str, int]

    def as_json(self) -> dict[str, Any]:
        return {"total": self.total, "by_category": dict(self.by_category)}


def device_memory(
    resident: Mapping[str, int], moments: Sequence[Mapping[str, int]]
) -> DeviceMemory:
    """``resident`` plus the largest of ``moments`` (each bytes by category).

    Examples
    --------
    >>> peak = device_memory({"parameters": 100}, [{"activations": 30}, {"gradients": 50}])
    >>> peak.total, peak.by_category["gradients"], peak.by_category["activations"]
    (150, 50, 0)
    """
    worst = max(moments, key=lambda held: sum(held.values()), default={})
    split = {c: resident.get(c, 0) + worst.get(c, 0) for c in CATEGORIES}
    return DeviceMemory(sum(split.values()), split)


def predict_memory(
    config: RunConfig,
    model: Sequential,
    optimizer: Optimizer,
    devices: Sequence[str],
    costs: DeviceCosts,
) -> dict[str, DeviceMemory]:
    """Every device's predicted peak under ``config`` on ``devices`` (in the strategy's rank
    order: for parameter servers the workers, then the shards)."""
    sizes = _Sizes(config, model, optimizer)
    name = config.strategy
    if name == "one-device":
        return {devices[0]: _one_device(sizes, config.batch_size)}
    if name in DATA_PARALLEL:
        return _data_parallel(sizes, config, devices)
    if name == "sharded":
        return _sharded(sizes, config, devices)
    if name == "parameter-server":
        return _parameter_server(sizes, config, devices)
    if name == "pipeline":
        options = config.options_of(PipelineOptions)
        return _pipeline(
            sizes,
            devices,
            config.batch_size,
            options.microbatches,
            options.schedule,
            1,
            virtual_stages=options.virtual_stages,
        )
    if name == "hybrid":
        hybrid = config.options_of(HybridOptions)
        replicas = len(devices) // hybrid.stages
        return _pipeline(
            sizes,
            devices,
            config.batch_size // replicas,
            hybrid.microbatches,
            hybrid.schedule,
            replicas,
            hybrid.stages,
            hybrid.virtual_stages,
        )
    if name == "model-parallel":
        return _model_parallel(sizes, config, devices, costs)
    if name == "mesh":
        return _mesh(config, model, optimizer, devices, costs)
    # A strategy without terms of its own: a whole replica on each device.
    return {device: _one_device(sizes, config.batch_size // len(devices)) for device in devices}


class _Sizes:
    """The model's bytes under a configuration's dtype and precision, and its graphs. Under
    mixed precision the parameters a step computes with are 16-bit copies, and the float32
    masters count with the optimizer state (as the devices hold them); gradients and buckets
    stay in the run's dtype."""

    def __init__(self, config: RunConfig, model: Sequential, optimizer: Optimizer) -> None:
        self.config, self.model, self.optimizer = config, model, optimizer
        self.mixed = config.precision != "fp32"
        self.dtype = config.dtype
        self.itemsize = np.dtype(config.dtype).itemsize
        self.compute_itemsize = np.dtype(HALF).itemsize if self.mixed else self.itemsize
        self.shapes = {name: tuple(shape) for name, shape in model.parameter_shapes().items()}
        self.accumulate = config.accumulate

    def parameters(self, names: Sequence[str] | None = None) -> int:
        return sum(_size(self.shapes[n]) for n in self._names(names)) * self.compute_itemsize

    def gradients(self, names: Sequence[str] | None = None) -> int:
        return sum(_size(self.shapes[n]) for n in self._names(names)) * self.itemsize

    def optimizer_state(self, names: Sequence[str] | None = None, fraction: float = 1.0) -> int:
        """Slots (and the masters under mixed precision) of ``names``, a ``fraction`` of each
        (a shard's part)."""
        total = 0
        for name in self._names(names):
            total += _slot_bytes(self.optimizer, name, self.shapes[name], self.dtype, fraction)
            if self.mixed:
                total += int(_size(self.shapes[name]) * fraction) * self.itemsize
        return total

    def resident(self, names: Sequence[str] | None = None) -> dict[str, int]:
        return {"parameters": self.parameters(names), "optimizer": self.optimizer_state(names)}

    def buckets(self, names: Sequence[str] | None = None, bucket_bytes: int = 0) -> list[Bucket]:
        shapes = {n: self.shapes[n] for n in self._names(names)}
        return plan_buckets(shapes, self.itemsize, bucket_bytes or DEFAULT_BUCKET_BYTES)

    def training(self, batch: int, with_update: bool) -> Graph:
        """The training graph a device runs (its gradients alone without ``with_update``),
        rewritten for ``--recompute`` and ``--precision`` as the run builds it."""
        optimizer = self.optimizer if with_update else None
        config = self.config
        return build_training_graph(
            self.model,
            optimizer,
            batch,
            self.dtype,
            recompute=config.recompute,
            precision=config.precision,
        ).graph

    def update(
        self, names: Sequence[str] | None = None, held: bool = True, **extra: int
    ) -> list[dict[str, int]]:
        """The moments of the update run (its learning rate, under mixed precision each
        refreshed 16-bit copy until assigned), ``extra`` bytes beside each; ``held``: the
        gradients it is fed are buffers the device counts already (else the run's own)."""
        graph = build_update_graph(
            self.model, self.optimizer, self.dtype, names, precision=self.config.precision
        )
        fed = [node.name for node in graph.nodes if node.op == "placeholder"]
        external = [name for name in fed if name.startswith(GRADIENT_PREFIX)] if held else []
        walk = live_bytes(graph, external=external)
        return [_plus(moment, **extra) for moment in _moments(walk)]

    def walk(self, graph: Graph, **options: Any) -> LiveBytes:
        """:func:`live_bytes` of a training graph as a device feeds it: under
        ``--accumulate K`` each micro-step's inputs and labels are slices of the device's
        whole batch, whose buffers they hold."""
        if self.accumulate > 1:
            options["fed_from"] = {
                name: graph.node(name).types[0].nbytes * self.accumulate
                for name in (INPUTS, LABELS)
                if graph.has_node(name)
            }
        return live_bytes(graph, **options)

    def _names(self, names: Sequence[str] | None) -> Sequence[str]:
        return list(self.shapes) if names is None else names


def _size(shape: Sequence[int]) -> int:
    return int(math.prod(shape))


def _slot_bytes(
    optimizer: Optimizer, name: str, shape: Sequence[int], dtype: str, fraction: float
) -> int:
    """The optimizer's slots of a variable of ``shape``, asked of a two-element stand-in (so
    no slot is allocated at full size): a slot of the stand-in's size is a copy of the
    variable, any other (Adam's step count) keeps its own size."""
    probe = np.zeros(2, dtype)
    total = 0
    for slot in optimizer.slots(name, probe).values():
        if slot.shape == probe.shape:
            total += int(_size(shape) * fraction) * slot.itemsize
        else:
            total += slot.nbytes
    return total


def _moments(walk: LiveBytes) -> list[dict[str, int]]:
    return [walk.at_start, *(held for _, held in walk.after)]


def _plus(held: Mapping[str, int], **extra: int) -> dict[str, int]:
    return {c: held.get(c, 0) + extra.get(c, 0) for c in CATEGORIES}


# one device and data parallelism ------------------------------------------------------------


def _one_device(sizes: _Sizes, batch: int) -> DeviceMemory:
    """The training graph with its updates, in one run; with ``--accumulate K``, K runs of
    the gradient graph at B/K into an accumulation buffer, then the update."""
    if sizes.accumulate == 1:
        return device_memory(sizes.resident(), _moments(live_bytes(sizes.training(batch, True))))
    micro = batch // sizes.accumulate
    walk = sizes.walk(sizes.training(micro, False))
    buffer = sizes.gradients()
    moments = [_plus(held, gradients=buffer) for held in _moments(walk)]
    return device_memory(sizes.resident(), moments)


def _backward_with_buckets(
    sizes: _Sizes,
    graph: Graph,
    buckets: Sequence[Bucket],
    keep_fetches: bool = True,
    gathered: Mapping[str, tuple[str, int]] | None = None,
) -> list[dict[str, int]]:
    """A replica's backward pass with each bucket packed (a copy, under communication) once
    its last gradient appears and held until the exchange ends. ``keep_fetches=False`` (ZeRO
    stages 2 and 3): the run hands each gradient over, and the replica holds it only until
    its bucket is packed. Under ``--accumulate K`` every micro-step but the first runs beside
    the accumulation buffers; in the last, each gradient's buffer becomes its mean as
    backward produces it (workbench/training/gradient_accumulation.py), so only the buffers
    of the gradients still to come are held beside the run's."""
    walk = sizes.walk(graph, keep_fetches=keep_fetches, gathered=gathered)
    producer = {graph.outputs[gradient_name(name)].node: name for name in sizes.shapes}
    bucket_of = {name: index for index, bucket in enumerate(buckets) for name in bucket.names}
    filled = [0] * len(buckets)
    accumulating = sizes.accumulate > 1
    coming = sizes.gradients() if accumulating else 0  # buffers not yet finished
    moments = []
    if sizes.accumulate > 2:  # a micro-step between the first and the last
        moments += [_plus(held, gradients=coming) for held in _moments(walk)]
    packed = waiting = 0
    moments.append(_plus(walk.at_start, gradients=coming))
    for node, held in walk.after:
        name = producer.get(node)
        made = 0  # a gradient handed over here: still in the run's values at this moment
        if name is not None:
            index = bucket_of[name]
            filled[index] += 1
            nbytes = sizes.gradients([name])
            made = 0 if keep_fetches else nbytes
            coming -= nbytes if accumulating else 0
            if filled[index] == len(buckets[index].names):
                packed += buckets[index].size * sizes.itemsize
                if not keep_fetches:
                    waiting -= sizes.gradients(buckets[index].names) - nbytes
                    made = 0
        moments.append(_plus(held, gradients=coming + waiting, communication=packed))
        waiting += made
    return moments


def _data_parallel(
    sizes: _Sizes, config: RunConfig, devices: Sequence[str]
) -> dict[str, DeviceMemory]:
    """Mirrored and multi-worker mirrored: every replica holds the variables and slots, runs
    backward on its share with its buckets packed as they fill, then updates from the
    reduced buckets (the buckets themselves under the ring, which reduces in place; beside
    them, where the all-reduce returns a buffer of its own, that buffer:
    :func:`_reduced_copies`). Central storage: after backward every replica packs its buckets for
    the reduce to rank 0 and receives the broadcast values into buffers of their own (rank
    0 packs them from its variables), all held to the step's end beside the gradients; rank
    0 updates in between, fed the reduced sums."""
    replicas = len(devices)
    micro = config.batch_size // replicas // sizes.accumulate
    graph = sizes.training(micro, False)
    bucket_bytes = int(config.options_of(DataParallelOptions).bucket_mb * 2**20)
    buckets = sizes.buckets(bucket_bytes=bucket_bytes)
    resident = sizes.resident()
    gradients = sizes.gradients()
    if config.strategy != "central-storage":
        # Every replica alike: computed once, however many there are. The update is fed the
        # reduced buckets' views.
        moments = _backward_with_buckets(sizes, graph, buckets)
        copies = _reduced_copies(sizes, config, buckets, replicas)
        moments += sizes.update(gradients=gradients, communication=gradients + copies)
        return dict.fromkeys(devices, device_memory(resident, moments))
    buffer = gradients if sizes.accumulate > 1 else 0
    computing = [_plus(held, gradients=buffer) for held in _moments(sizes.walk(graph))]
    broadcast = {"gradients": gradients, "communication": 2 * gradients}
    # Rank 0's update is fed the reduced sums, buffers of their own.
    updating = sizes.update(held=False, gradients=gradients, communication=gradients)
    others = device_memory(resident, [*computing, broadcast])  # every replica but rank 0
    return {
        device: device_memory(resident, [*computing, broadcast, *updating]) if not rank else others
        for rank, device in enumerate(devices)
    }


def _reduced_copies(
    sizes: _Sizes, config: RunConfig, buckets: Sequence[Bucket], replicas: int
) -> int:
    """The bytes of the reduced buckets a replica holds beside its packed ones: the ring
    (and NCCL) reduce a bucket in place, but the hierarchical all-reduce (multi-worker
    mirrored's: reduce to each group's leader, which broadcasts the sum) and reduce-to-one
    (which any algorithm takes for a bucket with fewer elements than replicas) return the
    sum in a buffer of its own (workbench/parallel/collectives). Compressed buckets are
    counted as the dense ring's."""
    options = config.options_of(DataParallelOptions)
    if options.compression != "none":
        return 0
    strategy = STRATEGIES[config.strategy]
    if not isinstance(strategy, DataParallel):
        return 0
    in_place = strategy.algorithm(config, config.device_type) in ("ring", "nccl")
    return sum(
        bucket.size * sizes.itemsize for bucket in buckets if not in_place or bucket.size < replicas
    )


def _sharded(sizes: _Sizes, config: RunConfig, devices: Sequence[str]) -> dict[str, DeviceMemory]:
    """ZeRO: rank r keeps its ring chunk of each bucket (the shard it updates) of the
    optimizer state (stage 1), the whole gradients only until their bucket is packed (stage
    2), and of the parameters only its chunk, a bucket gathered before its first read in
    forward and again in backward and let go of after the pass's last reader (stage 3).
    Every bucket is packed whole for its reduce-scatter; the reduced shards and, below stage
    3, the updated parameters all-gathered in place follow."""
    replicas = len(devices)
    stage = int(config.options.get("zero_stage", 3))
    micro = config.batch_size // replicas // sizes.accumulate
    bucket_bytes = int(float(config.options.get("bucket_mb", 25)) * 2**20)
    buckets = sizes.buckets(bucket_bytes=bucket_bytes)
    layout = ShardLayout(tuple(buckets), replicas)

    def bounds(rank: int) -> list[tuple[int, int]]:
        return [layout.bounds(index, rank) for index in range(len(buckets))]

    graph = sizes.training(micro, False)
    gathered = None
    if stage == 3:
        graph = gathered_reads(graph)
        gathered = {}
        for index, bucket in enumerate(buckets):
            nbytes = bucket.size * sizes.compute_itemsize
            for name in bucket.names:
                gathered[name] = (f"bucket{index}", nbytes)
                gathered[name + BACKWARD] = (f"bucket{index}{BACKWARD}", nbytes)
    keep = stage == 1 or sizes.accumulate > 1
    moments = _backward_with_buckets(sizes, graph, buckets, keep, gathered)
    per_element, per_bucket = _slot_layout(sizes)
    result = {}
    updates: dict[tuple, list[dict[str, int]]] = {}
    peaks: dict[tuple, DeviceMemory] = {}
    for rank, device in enumerate(devices):
        chunk = sum(hi - lo for lo, hi in bounds(rank))
        resident = {
            "parameters": (sizes.parameters() if stage < 3 else chunk * sizes.compute_itemsize),
            "optimizer": chunk * per_element + len(buckets) * per_bucket,
        }
        # After backward: the reduced shards, at stage 1 views of the packed buckets, beside
        # the whole gradients where they are kept; from stage 2 copies, the buckets gone
        # (sharded_replica.py). The shard update runs beside them (under mixed precision, a
        # 16-bit rounding of each master until assigned).
        whole = sizes.gradients() if keep else 0
        reduced = {
            "gradients": whole + (chunk * sizes.itemsize if stage > 1 else 0),
            "communication": sizes.gradients() if stage == 1 else 0,
        }
        shard = tuple(hi - lo for lo, hi in bounds(rank))
        # Ranks' shards differ by an element at most: each update walked once.
        key = (shard, tuple(reduced.items()))
        if key not in updates:
            updates[key] = _shard_update(sizes, shard, reduced)
        # Ranks whose shards and buffers are alike peak alike: each computed once.
        peak_key = (key, tuple(resident.items()))
        if peak_key not in peaks:
            peaks[peak_key] = device_memory(resident, [*moments, reduced, *updates[key]])
        result[device] = peaks[peak_key]
    return result


def _shard_update(
    sizes: _Sizes, chunks: Sequence[int], reduced: Mapping[str, int]
) -> list[dict[str, int]]:
    """The moments of a rank's shard update (its learning rate; under mixed precision each
    master shard's 16-bit rounding until assigned), fed the reduced shards held beside it."""
    half = compute_dtype(sizes.config.precision)
    graph = shard_update_graph(sizes.optimizer, sizes.dtype, list(chunks), half)
    fed = [node.name for node in graph.nodes if node.op == "placeholder"]
    walk = live_bytes(graph, external=[name for name in fed if name.startswith(GRADIENT_PREFIX)])
    return [_plus(moment, **reduced) for moment in _moments(walk)]


def _slot_layout(sizes: _Sizes) -> tuple[int, int]:
    """A shard's optimizer bytes per element (its slots, and its float32 master under mixed
    precision) and per bucket (a scalar slot, Adam's step count, kept once per bucket)."""
    probe = np.zeros(2, sizes.dtype)
    per_element = sizes.itemsize if sizes.mixed else 0
    per_bucket = 0
    for slot in sizes.optimizer.slots("probe", probe).values():
        if slot.shape == probe.shape:
            per_element += slot.itemsize
        else:
            per_bucket += slot.nbytes
    return per_element, per_bucket


# parameter servers --------------------------------------------------------------------------


def _parameter_server(
    sizes: _Sizes, config: RunConfig, devices: Sequence[str]
) -> dict[str, DeviceMemory]:
    """Workers hold no state: each step they pull every variable (the payloads held, under
    communication, while the step computes with views of them), run the gradient graph on
    their share and push each shard its part: after the graph, every gradient it produced
    waits beside the pulled payloads until pushed. A shard keeps its variables and slots and,
    while a step's pushes arrive, the payload it sums into, then updates fed the sum."""
    options = config.options_of(ParameterServerOptions)
    workers, shards = devices[: config.devices], devices[config.devices :]
    pieces = place_variables(
        sizes.shapes, len(shards), sizes.itemsize, options.ps_partition_min_bytes
    )
    held = [0] * len(shards)
    slots = [0] * len(shards)
    for piece in pieces:
        nbytes = _size(piece.shape) * sizes.itemsize
        held[piece.shard] += nbytes
        fraction = _size(piece.shape) / max(1, _size(sizes.shapes[piece.variable]))
        slots[piece.shard] += sizes.optimizer_state([piece.variable], fraction)
    micro = config.batch_size // len(workers) // sizes.accumulate
    # A worker runs its partition of the client graph: its receives view the pulled payloads.
    client = build_parameter_server_graph(
        sizes.model, sizes.optimizer, micro, sizes.dtype, workers[:1], shards, pieces
    )
    program = client.worker_program(0)
    received = [node.name for node in program.nodes if node.op == "recv"]
    walk = sizes.walk(program, external=received)
    buffer = sizes.gradients() if sizes.accumulate > 1 else 0
    pulled = sum(held)
    worker_moments = [
        _plus(held_now, gradients=buffer, communication=pulled) for held_now in _moments(walk)
    ]
    worker_moments.append(_plus({}, gradients=sizes.gradients(), communication=pulled))
    result = dict.fromkeys(workers, device_memory({}, worker_moments))
    for index, (shard, nbytes, state) in enumerate(zip(shards, held, slots)):
        names = sorted({piece.variable for piece in pieces if piece.shard == index})
        taking = sizes.update(names, communication=nbytes)
        result[shard] = device_memory({"parameters": nbytes, "optimizer": state}, taking)
    return result


# pipelines ----------------------------------------------------------------------------------


def in_flight(actions: Sequence[Any]) -> list[int]:
    """Micro-batches a stage holds after each of its schedule's actions (a forward stashes
    one, a backward frees one; of a split backward, the weight-gradient half, which still
    reads the stage input).

    Examples
    --------
    >>> from workbench.parallel.pipeline.schedules import make_schedule
    >>> [max(in_flight(make_schedule(name, 2, 8)[0])) for name in ("gpipe", "1f1b")]
    [8, 2]
    >>> max(in_flight(make_schedule("zero-bubble", 2, 8)[1]))
    2
    """
    held, counts = 0, []
    for action in actions:
        if action.kind == FORWARD:
            held += 1
        elif action.kind != INPUT_GRAD:
            held -= 1
        counts.append(held)
    return counts


@dataclass(frozen=True)
class _ChunkBytes:
    """What one model chunk's graphs hold (see :func:`_pipeline`)."""

    names: tuple[str, ...]
    kept: int  # a micro-batch in flight: its input and its stash
    input_bytes: int
    sent_forward: int
    received: int
    sent_backward: int
    forward: list[dict[str, int]]
    backward: list[dict[str, int]]


def _chunk_bytes(sizes: _Sizes, layers: range, micro: int, first: bool, last: bool) -> _ChunkBytes:
    graphs = build_stage_graphs(
        sizes.model, layers, micro, sizes.dtype, first, last, recompute=sizes.config.recompute
    )
    forward_walk = live_bytes(graphs.forward, external=(STAGE_INPUT,))
    # What a micro-batch in flight keeps: its input, and its stash (by buffer, once).
    stash = dict(
        buffer
        for key in graphs.stash
        if (buffer := forward_walk.fetched_buffers.get(key)) is not None
    )
    input_bytes = _placeholder_bytes(graphs.forward, STAGE_INPUT)
    # The chunk holds the stash, its input and the received gradient: counted here once.
    outside = (STAGE_INPUT, OUTPUT_GRADIENT, *graphs.stash)
    return _ChunkBytes(
        names=graphs.parameter_names,
        kept=input_bytes + sum(stash.values()),
        input_bytes=input_bytes,
        sent_forward=(
            0 if last else graphs.forward.type_of(graphs.forward.outputs[ACTIVATION]).nbytes
        ),
        received=0 if last else _placeholder_bytes(graphs.backward, OUTPUT_GRADIENT),
        sent_backward=0 if first else _input_gradient(graphs.backward),
        forward=_moments(forward_walk),
        backward=_moments(live_bytes(graphs.backward, external=outside)),
    )


def _pipeline(
    sizes: _Sizes,
    devices: Sequence[str],
    replica_batch: int,
    microbatches: int,
    schedule: str,
    replicas: int,
    stages: int | None = None,
    virtual_stages: int = 1,
) -> dict[str, DeviceMemory]:
    """Stage s keeps its layers' variables and slots (those of each of its model chunks, with
    interleaving) and, once a chunk's first backward has run, the summed gradients of its
    micro-batches; for each micro-batch in flight on each chunk (its schedule's forwards not
    yet matched by backwards, or by the weight-gradient half of a split backward: GPipe all
    M, 1F1B at most P - s, zero-bubble at most P) the chunk input and the forward values its
    backward reads (all of them under ``--recompute none``, the layers' inputs under
    ``full``); every activation and input gradient it has sent, until the step's end delivers
    them (communication, with the output gradient a backward receives); on top, the forward
    or backward graph running at that moment (an input-gradient half counted as a whole
    backward: an upper bound). At the end the update reads the averaged gradients; a hybrid
    mesh's stage first packs its sums into buckets for its stage group's all-reduce."""
    stages = len(devices) if stages is None else stages
    chunks = virtual_stages if schedule == "interleaved-1f1b" else 1
    micro = replica_batch // microbatches
    order = make_schedule(schedule, stages, microbatches, chunks)
    groups = split_layers(sizes.model, stages * chunks)
    result = {}
    for stage in range(stages):
        parts = [
            _chunk_bytes(sizes, groups[k], micro, k == 0, k == len(groups) - 1)
            for k in range(stage, len(groups), stages)
        ]
        names = tuple(name for part in parts for name in part.names)
        totals = sizes.gradients(names)
        moments: list[dict[str, int]] = []
        held = [0] * len(parts)
        summed = [0] * len(parts)
        sent = 0
        for action in order[stage]:
            part = parts[action.chunk]
            keeping = sum(count * p.kept for count, p in zip(held, parts))
            if action.kind == FORWARD:
                # This micro-batch's input is held; its stash is still the run's own values.
                moments += [
                    _plus(
                        moment,
                        activations=keeping + part.input_bytes,
                        gradients=sum(summed),
                        communication=sent,
                    )
                    for moment in part.forward
                ]
                held[action.chunk] += 1
                sent += part.sent_forward
                continue
            # The backward of a micro-batch still holds what it kept while it runs.
            moments += [
                _plus(
                    moment,
                    activations=keeping,
                    gradients=sum(summed),
                    communication=sent + part.received,
                )
                for moment in part.backward
            ]
            # The input gradient goes back after B or I; the micro-batch is freed and the
            # chunk's sums exist after B or W.
            if action.kind != WEIGHT_GRAD:
                sent += part.sent_backward
            if action.kind != INPUT_GRAD:
                held[action.chunk] -= 1
                summed[action.chunk] = sizes.gradients(part.names)
        # The update is fed the averaged sums, buffers of their own.
        packed = totals if replicas > 1 else 0
        moments += sizes.update(names, False, gradients=totals, communication=sent + packed)
        peak = device_memory(sizes.resident(names), moments)  # every replica's stage alike
        for replica in range(replicas):
            result[devices[replica * stages + stage]] = peak
    return result


def _placeholder_bytes(graph: Graph, name: str) -> int:
    """The bytes fed to placeholder ``name``; none where the graph does not take it (a first
    stage without parameters, ``flatten`` alone, has an empty backward graph)."""
    return graph.node(name).types[0].nbytes if graph.has_node(name) else 0


def _input_gradient(backward: Graph) -> int:
    """The bytes of the input gradient a stage's backward sends to the stage before it."""
    return backward.type_of(backward.outputs[INPUT_GRADIENT]).nbytes


# the device mesh ----------------------------------------------------------------------------


def _mesh(
    config: RunConfig,
    model: Sequential,
    optimizer: Optimizer,
    devices: Sequence[str],
    costs: DeviceCosts,
) -> dict[str, DeviceMemory]:
    """Each device's chunks of its stage, split for its tensor rank
    (:mod:`workbench.planner.mesh_memory`)."""
    from workbench.planner.mesh_memory import mesh_memory
    from workbench.planner.mesh_step import MeshCosting, mesh_layout

    costing = MeshCosting(model, optimizer, config.dtype, costs, config.recompute)
    terms = mesh_memory(costing, mesh_layout(config), devices)
    return {device: device_memory(*held) for device, held in terms.items()}


# model parallelism --------------------------------------------------------------------------


def _model_parallel(
    sizes: _Sizes, config: RunConfig, devices: Sequence[str], costs: DeviceCosts
) -> dict[str, DeviceMemory]:
    """Each device's partition of the placed training graph: the variables placed there
    (with their slots) and its partition's live values, the tensors it receives included."""
    placement = config.options_of(ModelParallelOptions).placement
    plan = build_model_parallel_graph(
        sizes.model,
        sizes.optimizer,
        config.batch_size,
        sizes.dtype,
        devices,
        placement,
        costs,
        costs.source,
        recompute=config.recompute,
    )
    result = {}
    for device in devices:
        partition = plan.partitioned.partitions.get(device)
        if partition is None:
            result[device] = device_memory({}, [])
            continue
        names = [node.attrs["var"] for node in partition.nodes if node.op == "variable"]
        names = [name for name in dict.fromkeys(names) if name in sizes.shapes]
        result[device] = device_memory(sizes.resident(names), _moments(live_bytes(partition)))
    return result
