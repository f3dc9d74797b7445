"""``sharded``'s step as simulator programs, mirroring
``parallel/data_parallel/sharded_replica.py``: backward on the replica's share with each
bucket reduce-scattered on the communication thread as it completes, the update of the
rank's shards, then (stages 1 and 2) the all-gather of the updated parameters; at stage 3 no
all-gather after the update, but one of each bucket before its first read in forward and
another before its first read in backward, queued on the communication thread behind the
reduce-scatters as the replica queues them. The halves are the simulator's ring programs
(:mod:`workbench.simulate.collectives`), cut where the all-gather begins.

With ``--accumulate K`` the replica's share is computed in K micro-steps at the micro batch
(``parallel/data_parallel/gradient_worker.py``), each adding into the accumulation buffers,
and only the last hands its buckets over for the one reduce-scatter; at stage 3 every
micro-step's forward and backward gather the buckets they read again, since the gathered
parameters go after each pass's last reader.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from workbench.ir.graph import Graph, Node
from workbench.models import Sequential
from workbench.optim import Optimizer
from workbench.parallel.collectives import plan_buckets
from workbench.parallel.data_parallel.gathered_reads import BACKWARD, gathered_reads
from workbench.parallel.data_parallel.sharded_replica import shard_update_graph
from workbench.parallel.data_parallel.shards import ShardLayout
from workbench.planner.device_costs import DeviceCosts
from workbench.planner.graph_segments import graph_seconds, node_actions
from workbench.planner.step_programs import COMMUNICATION, StepPrograms, _adding
from workbench.planner.stragglers import straggler_factor
from workbench.simulate import (
    Action,
    Compute,
    Labels,
    RingOptions,
    RingPart,
    Signal,
    Wait,
    ring_allreduce_programs,
)
from workbench.simulate.programs import MAIN
from workbench.training.graphs import build_training_graph, gradient_name


def ring_halves(
    devices: Sequence[str], nbytes: int, itemsize: int, add: float, key: str, stream: str
) -> tuple[dict[str, list[Action]], dict[str, list[Action]]]:
    """(the reduce-scatter, the all-gather) of a ring over ``devices`` of ``nbytes``, each
    device's actions in ``stream`` (one action a rank on large rings, as mirrored's)."""

    def half(part: RingPart) -> dict[str, list[Action]]:
        options = RingOptions(itemsize, labels=Labels("allreduce", stream), part=part)
        return ring_allreduce_programs(list(devices), nbytes, add, key, options)

    return half("reduce-scatter"), half("all-gather")


def sharded_step(
    model: Sequential,
    optimizer: Optimizer,
    batch: int,
    dtype: str,
    devices: Sequence[str],
    costs: DeviceCosts,
    bucket_bytes: int,
    zero_stage: int,
    recompute: str = "none",
    accumulate: int = 1,
) -> StepPrograms:
    """``sharded`` at ``zero_stage`` (see the module docstring), its backward recomputing
    what ``recompute`` (a ``--recompute`` policy) says, in ``accumulate`` micro-steps."""
    replicas = len(devices)
    micro = batch // replicas // accumulate
    graph = build_training_graph(model, None, micro, dtype, recompute=recompute).graph
    if zero_stage == 3:
        graph = gathered_reads(graph)
    itemsize = np.dtype(dtype).itemsize
    layout = ShardLayout(
        tuple(plan_buckets(model.parameter_shapes(), itemsize, bucket_bytes)), replicas
    )
    producer = {graph.outputs[gradient_name(name)].node: name for name in model.parameter_shapes()}
    add = costs.add_seconds_per_byte

    def halves(index: int, key: str, stream: str):
        nbytes = layout.buckets[index].size * itemsize
        return ring_halves(devices, nbytes, itemsize, add, key, stream)

    programs: dict[str, list[Action]] = {}
    # What the communication thread is handed, in order: (bucket, its signal, a gather?).
    order: list[tuple[int, str, bool]] = []
    adding = _adding(model, dtype, costs)
    stretch = straggler_factor(costs.variation(graph), replicas)
    first: list[Action] | None = None
    for device in devices:
        if first is not None:
            programs[device] = list(first)  # a described cluster's replicas are alike
            continue
        order.clear()
        actions: list[Action] = []
        for step in range(accumulate):
            last = step == accumulate - 1
            # The last micro-step's own add into the buffers comes before it (as
            # ``step_programs.accumulated`` counts it).
            actions += [adding] if last and accumulate > 1 else []
            exchanges = _micro_step(layout, producer, zero_stage, order, step, last)
            actions += node_actions(graph, costs, device, exchanges, stretch=stretch)
            actions += [] if last else [adding]
        programs[device] = actions
        if costs.cluster is not None:
            first = actions
    communication: dict[str, list[Action]] = {device: [] for device in devices}
    for index, tag, gathers in order:
        if not gathers:
            scatter, _ = halves(index, f"b{index}", COMMUNICATION)
            for device in devices:
                communication[device] += [Wait(tag, COMMUNICATION), *scatter[device]]
            continue
        _, gather = halves(index, tag, COMMUNICATION)
        for device in devices:
            communication[device] += [
                Wait(tag, COMMUNICATION),
                *gather[device],
                Signal(f"{tag}/done", COMMUNICATION),
            ]
    updates: dict[tuple[int, ...], Graph] = {}  # ranks' shards differ by an element at most
    for rank, device in enumerate(devices):
        bounds = (layout.bounds(i, rank) for i in range(len(layout.buckets)))
        shard = tuple(hi - lo for lo, hi in bounds)
        if shard not in updates:
            updates[shard] = shard_update_graph(optimizer, dtype, list(shard))
        update = updates[shard]
        programs[device] += communication[device]
        programs[device] += [
            Signal("reduced", COMMUNICATION),
            Wait("reduced"),
            Compute(graph_seconds(update, costs, device), "update", phase="update"),
        ]
    if zero_stage < 3:
        for index in range(len(layout.buckets)):
            _, gather = halves(index, f"p{index}", MAIN)
            for device in devices:
                programs[device] += gather[device]
    return StepPrograms(programs, costs.ring_link)


def _micro_step(
    layout: ShardLayout,
    producer: dict[str, str],
    zero_stage: int,
    order: list[tuple[int, str, bool]],
    step: int,
    last: bool,
) -> Callable[[Node], list[Action]]:
    """The exchanges micro-step ``step`` asks for as its graph runs, each appended to
    ``order`` (what the communication thread is handed): at stage 3 a gather before each
    pass's first read of a bucket; in the last micro-step, each bucket once backward has
    filled it."""
    bucket_of = layout.bucket_of()
    filled = dict.fromkeys(range(len(layout.buckets)), 0)
    served: set[tuple[int, bool]] = set()
    suffix = f"/m{step}" if step else ""  # each micro-step's gathers are their own

    def requests(node: Node) -> list[Action]:
        if node.op == "variable" and zero_stage == 3:
            var = node.attrs["var"]
            index = bucket_of[var.removesuffix(BACKWARD)]
            key = (index, var.endswith(BACKWARD))
            if key in served:
                return []
            served.add(key)
            tag = f"g{index}{'b' if key[1] else 'f'}{suffix}"
            order.append((index, tag, True))
            return [Signal(tag), Wait(f"{tag}/done")]
        name = producer.get(node.name)
        if name is None or not last:
            return []
        index = bucket_of[name]
        filled[index] += 1
        if filled[index] < len(layout.buckets[index].names):
            return []
        order.append((index, f"bucket{index}", False))
        return [Signal(f"bucket{index}")]

    return requests
