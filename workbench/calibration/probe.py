"""Measuring a cluster's costs on its devices: every node of the run's graphs at its shapes,
one-way transfers between each pair of devices over the transport the run uses, the add of a
reduction, and Dask's cost to dispatch one round of tasks. The figures go into a
:class:`~workbench.costs.calibration.Calibration`; fitting and storing are there.

Each device measures its own nodes in a task on its worker, all devices at once, so a time
includes what devices sharing a host cost each other, as they do in a data-parallel step.
"""

from __future__ import annotations

import hashlib
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.costs.calibration import Calibration, fit_link, link_key
from workbench.costs.op_costs import graph_signature, op_signature
from workbench.events.records import Phase, PhaseEvent, StepReport
from workbench.ir import Executable, Graph
from workbench.optim import make_optimizer
from workbench.runtime.cluster import ClusterSession
from workbench.runtime.device_arrays import DeviceArrays, out_of_memory_cause
from workbench.runtime.peer_transport import PeerTransport
from workbench.runtime.transport import recv_into
from workbench.runtime.worker_service import device_service

# 1 KiB, 256 KiB, 2 MiB, 8 MiB. The largest is past the caches, where a copy runs at memory
# speed: fitted through 2 MiB alone, the 2-core machine's shared-memory links read 17 GB/s,
# while an 8 MiB tensor (a model-parallel activation) crossed at 6 GB/s and 32 MiB at 3.2.
TRANSFER_SIZES = (1 << 10, 1 << 18, 1 << 21, 1 << 23)
# Enough for a link's latency: where a strategy times its transfers as whole collectives, its
# peer links carry only the collectives' meeting messages.
LATENCY_SIZES = TRANSFER_SIZES[:2]
ADD_BYTES = 1 << 22
ADD_PAIRS = 3  # 24 MiB a device: with a neighbour timing too, more than a last-level cache
# Bumped when what is measured, or how, changes: a cached calibration of another format is
# measured again.
CALIBRATION_FORMAT = "9"
# Timing a graph: at most this many repeats, within this many seconds of each device's time
# per graph (a step of the reference MLP takes a few milliseconds: all twelve; the CNN's, tens
# of milliseconds: the minimum). Calibration stays a small share of a short run.
MAX_REPEATS = 12
GRAPH_BUDGET_SECONDS = 0.15
OUTLIER_FACTOR = 2.0  # a run longer than this many medians counts as this many in the mean
# How tensors travel between devices, each timed on its own: ``peer`` (one-way Send/Recv over
# the shared-memory channels or Dask's comms), ``rpc`` (Dask RPCs, as parameter servers are
# called) and ``ring`` (every device sending right while receiving from the left).
WIRES = ("peer", "rpc", "ring")


# The optimizer whose slots an update op reads: its ``slots`` says their shapes and dtypes
# (Adam's step count is a scalar, not shaped like its variable).
_OPTIMIZER_OF_UPDATE = {"apply_sgd": "sgd", "apply_momentum": "momentum", "apply_adam": "adam"}


def _feeds_and_state(graph: Graph, device: DeviceArrays) -> tuple[dict, dict]:
    """Random inputs and variables of the right shapes (integers zero: valid labels and
    token ids)."""
    generator = np.random.default_rng(0)
    feeds: dict[str, Any] = {}
    state: dict[str, Any] = {}
    for node in graph.nodes:
        if node.op not in ("placeholder", "variable"):
            continue
        kind = node.types[0]
        if np.issubdtype(np.dtype(kind.dtype), np.floating):
            value = generator.standard_normal(kind.shape).astype(kind.dtype) * 0.01
        else:
            value = np.zeros(kind.shape, kind.dtype)
        value = device.to_device(value)
        if node.op == "placeholder":
            feeds[node.name] = value
        else:
            state[node.attrs["var"]] = value
    for node in graph.nodes:
        if node.op in _OPTIMIZER_OF_UPDATE:
            kind = graph.type_of(node.inputs[0])
            optimizer = make_optimizer(_OPTIMIZER_OF_UPDATE[node.op])
            slots = optimizer.slots(node.attrs["var"], np.zeros(kind.shape, kind.dtype))
            state.update({name: device.to_device(value) for name, value in slots.items()})
    return feeds, state


def graph_runner(graph: Graph, device: DeviceArrays | None = None) -> Callable[[], None]:
    """A call that runs ``graph`` once on random inputs of its shapes (and waits for the
    device): a step's compute as calibration times it, for probes that time it in context."""
    device = device or DeviceArrays.for_kind("cpu")
    executable = Executable(graph)
    feeds, state = _feeds_and_state(graph, device)

    def run() -> None:
        executable.run(feeds, state, device.xp)
        device.synchronize()

    return run


class _NodeClock:
    """Called after each node: adds the time since the previous call to the node's signature
    (the device synchronised first, so a GPU kernel's time is its own)."""

    def __init__(self, graph: Graph, device: DeviceArrays) -> None:
        self.graph, self.device = graph, device
        self.seconds: dict[str, float] = {}
        self.last = time.perf_counter()

    def __call__(self, node, result) -> None:
        self.device.synchronize()
        now = time.perf_counter()
        signature = op_signature(self.graph, node)
        self.seconds[signature] = self.seconds.get(signature, 0.0) + now - self.last
        self.last = now


@dataclass(frozen=True)
class GraphTiming:
    """What timing one graph found on one device.

    ``node_seconds``: each node signature's median time, scaled by the whole run's trimmed mean
    over its median; ``overhead_seconds``: a whole run's median beyond its nodes (dispatch in
    the interpreter, releasing buffers), scaled alike; ``variation``:
    the whole run's spread over its median (what synchronous replicas wait for: the slowest
    of them, :mod:`workbench.planner.stragglers`)."""

    node_seconds: dict[str, float]
    overhead_seconds: float
    variation: float
    median_seconds: float


def time_graph_nodes(
    graph: Graph,
    repeats: int = 5,
    device: DeviceArrays | None = None,
    budget_seconds: float = 0.0,
) -> GraphTiming:
    """Time ``graph``'s nodes over at least ``repeats`` runs (after one untimed), more while
    they fit in ``budget_seconds`` (up to :data:`MAX_REPEATS`): a cheap graph is timed often
    enough for its spread to show, a costly one within the budget.

    Examples
    --------
    >>> from workbench.ir import GraphBuilder, ops
    >>> b = GraphBuilder()
    >>> x = b.placeholder("x", (64, 64), "float32")
    >>> timing = time_graph_nodes(b.build({"y": ops.relu(ops.matmul(x, x))}))
    >>> sorted(timing.node_seconds)
    ['matmul(64x64:float32,64x64:float32)', 'relu(64x64:float32)']
    """
    device = device or DeviceArrays.for_kind("cpu")
    executable = Executable(graph)
    feeds, state = _feeds_and_state(graph, device)
    samples: dict[str, list[float]] = {}
    totals = []
    start = time.perf_counter()
    executable.run(feeds, state, device.xp)  # first touch of every buffer
    device.synchronize()
    first = time.perf_counter() - start
    # Each repeat is a hooked run and an untimed one.
    affordable = int(budget_seconds / max(2 * first, 1e-9))
    repeats = max(repeats, min(MAX_REPEATS, affordable))
    counts: dict[str, int] = {}
    for node in executable.graph.nodes:
        if node.op not in ("placeholder", "constant"):
            signature = op_signature(graph, node)
            counts[signature] = counts.get(signature, 0) + 1
    for _ in range(repeats):
        clock = _NodeClock(graph, device)
        executable.run(feeds, state, device.xp, on_node=clock)
        for signature, seconds in clock.seconds.items():
            samples.setdefault(signature, []).append(seconds / counts[signature])
        start = time.perf_counter()
        executable.run(feeds, state, device.xp)
        device.synchronize()
        totals.append(time.perf_counter() - start)
    medians = {signature: statistics.median(times) for signature, times in samples.items()}
    node_sum = sum(
        medians[op_signature(graph, node)]
        for node in graph.nodes
        if node.op not in ("placeholder", "constant")
    )
    middle = statistics.median(totals)
    # The spread of typical steps, robust to the one step a busy moment stretched tenfold (a
    # normal distribution's standard deviation is 1.4826 median absolute deviations).
    deviation = 1.4826 * statistics.median(abs(total - middle) for total in totals)
    # A run's throughput pays its steps' mean, which the slower ones pull above the median:
    # the nodes are scaled by the whole step's mean over its median, each run capped at
    # OUTLIER_FACTOR medians (one run a busy moment stretched tenfold would otherwise stand
    # for every step). Leaving the slowest runs out instead would scale by less than one
    # whenever few runs fit the budget: with three, the mean of the two fastest.
    tail = _capped_mean(totals, OUTLIER_FACTOR * middle) / middle if middle > 0 else 1.0
    return GraphTiming(
        node_seconds={signature: seconds * tail for signature, seconds in medians.items()},
        overhead_seconds=max(0.0, middle - node_sum) * tail,
        variation=deviation / middle if middle > 0 else 0.0,
        median_seconds=middle,
    )


def _capped_mean(values: Sequence[float], cap: float) -> float:
    """The mean of ``values``, each counted as no more than ``cap``.

    Examples
    --------
    >>> _capped_mean([1.0, 2.0, 3.0, 100.0], 6.0)
    3.0
    """
    return statistics.fmean(min(value, cap) for value in values)


def time_add(device: DeviceArrays | None = None, nbytes: int = ADD_BYTES) -> float:
    """Bytes per second of ``a += b`` on float32 arrays of ``nbytes``: a reduction's arithmetic
    on this device, on tensors not in any cache (a received gradient has just arrived; a
    tensor added over and over would be, and add several times faster): each add takes the
    next of :data:`ADD_PAIRS` pairs, more bytes together than a CPU's caches hold."""
    device = device or DeviceArrays.for_kind("cpu")
    pairs = [
        (
            device.to_device(np.ones(nbytes // 4, np.float32)),
            device.to_device(np.ones(nbytes // 4, np.float32)),
        )
        for _ in range(ADD_PAIRS)
    ]
    times = []
    for left, right in pairs:
        start = time.perf_counter()
        left += right
        device.synchronize()
        times.append(time.perf_counter() - start)
    return nbytes / statistics.median(times[1:])


def measure_device(
    graphs: Sequence[Graph], kind: str, repeats: int, skip: Sequence[str] = ()
) -> dict[str, Any]:
    """Task on one device: its node times (signatures in ``skip`` are already known), its
    per-step overhead, each graph's variation and its add rate."""
    device = DeviceArrays.for_kind(kind)
    op_seconds, overheads, variation = {}, [], {}
    known = set(skip)
    for graph in graphs:
        signatures = {op_signature(graph, n) for n in graph.nodes if n.op not in ("placeholder",)}
        if signatures <= known:
            continue
        try:
            timing = time_graph_nodes(graph, repeats, device, GRAPH_BUDGET_SECONDS)
        except Exception as error:
            if out_of_memory_cause(device, error) is None:
                raise
            # The step does not fit this device: the run itself will say so, naming its
            # device, step and bytes; its nodes keep estimated times meanwhile.
            continue
        op_seconds.update({s: t for s, t in timing.node_seconds.items() if s not in known})
        overheads.append(timing.overhead_seconds)
        variation[graph_signature(graph)] = timing.variation
    return {
        "op_seconds": op_seconds,
        "step_overhead_seconds": statistics.median(overheads) if overheads else None,
        "step_variation": variation,
        "add_bytes_per_second": time_add(device),
        "host": platform.node(),
        "cores": usable_cores(),
    }


def usable_cores() -> int:
    """The cores this process may run on (its affinity, where the OS tells it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def measure_transfers(
    run_id: str,
    rank: int,
    addresses: list[str],
    device_names: list[str],
    pairs: Sequence[tuple[int, int]],
    repeats: int,
    stall_timeout: float,
    shared_memory: bool = True,
    sizes: Sequence[int] = TRANSFER_SIZES,
) -> list[tuple[int, int, int, float]]:
    """Task on every device: for each ``(source, destination)`` pair in turn, ``repeats``
    ping-pongs of each of ``sizes`` (the destination echoes the tensor back); a
    one-way time is half a round trip. Returns ``(source, destination, bytes, seconds)``
    medians, measured by the source. ``shared_memory=False`` times Dask's RPCs (what
    parameter-server pulls and pushes use) instead of the peer channels."""
    transport = PeerTransport(
        run_id, rank, addresses, device_names, stall_timeout, shared_memory=shared_memory
    )
    results = []
    try:
        for source, destination in pairs:
            if rank not in (source, destination):
                continue
            for size in sizes:
                payload = np.ones(size // 4, np.float32)
                times = []
                for index in range(repeats + 1):
                    key = f"calibrate/{source}-{destination}/{size}/{index}"
                    if rank == source:
                        start = time.perf_counter()
                        transport.send(destination, key, payload)
                        transport.recv(destination, key + "/echo")
                        times.append((time.perf_counter() - start) / 2)
                    else:
                        echoed = transport.recv(source, key)
                        transport.send(source, key + "/echo", np.array(echoed, copy=True))
                if rank == source:
                    results.append((source, destination, size, statistics.median(times[1:])))
    finally:
        device_service().forget(run_id)
    return results


def measure_ring_shifts(
    run_id: str,
    rank: int,
    addresses: list[str],
    device_names: list[str],
    repeats: int,
    stall_timeout: float,
    sizes: Sequence[int] = TRANSFER_SIZES,
) -> list[tuple[int, int, int, float]]:
    """Task on every device: ``repeats`` ring shifts of each of ``sizes``, every
    rank sending to its right neighbour while receiving from its left into a buffer of its
    own, as each step of a ring all-reduce does (both directions busy at once, which on few
    cores costs more than a send alone). Returns ``(rank, right, bytes, seconds)`` medians."""
    transport = PeerTransport(run_id, rank, addresses, device_names, stall_timeout)
    size = len(addresses)
    right, left = (rank + 1) % size, (rank - 1) % size
    results = []
    try:
        for nbytes in sizes:
            payload = np.ones(nbytes // 4, np.float32)
            received = np.empty_like(payload)
            times = []
            for index in range(repeats + 1):
                ring_barrier(transport, f"calibrate/shift/{nbytes}/{index}/barrier")
                start = time.perf_counter()
                transport.send(right, f"calibrate/shift/{nbytes}/{index}", payload)
                recv_into(transport, left, f"calibrate/shift/{nbytes}/{index}", received)
                times.append(time.perf_counter() - start)
            results.append((rank, right, nbytes, statistics.median(times[1:])))
    finally:
        device_service().forget(run_id)
    return results


def ring_barrier(transport: PeerTransport, key: str) -> None:
    """Every rank has reached this point: a token passed once around the ring."""
    size, rank = transport.size, transport.rank
    token = np.zeros(1, np.float32)
    if rank == 0:
        transport.send(1 % size, key, token)
        transport.recv(size - 1, key)
        transport.send(1 % size, key + "/go", token)
        transport.recv(size - 1, key + "/go")
    else:
        transport.recv(rank - 1, key)
        transport.send((rank + 1) % size, key, token)
        transport.recv(rank - 1, key + "/go")
        transport.send((rank + 1) % size, key + "/go", token)


def _chunk_report(device: str, first: int, count: int) -> StepReport:
    """What a device's task returns for ``count`` steps, without running them: three phase
    events and a loss per step (the size and shape the client receives and logs)."""
    events = [
        PhaseEvent(device, phase, step, 0.0, 0.0)
        for step in range(first, first + count)
        for phase in (Phase.COMPUTE, Phase.ALLREDUCE, Phase.UPDATE)
    ]
    return {"events": events, "losses": [(step, 0.0) for step in range(first, first + count)]}


DISPATCH_ROUNDS = 5  # rounds of tasks whose median is the dispatch's time


def measure_dispatch(
    session: ClusterSession, steps_per_task: int, repeats: int = 1, warmed: bool = False
) -> float:
    """Median seconds for one round of tasks, one pinned to each device, that return a chunk's
    report, submitted, gathered and read as the step loop does between chunks. The first
    round is not timed (it pays for first uses) unless rounds of this module's tasks have just
    run on every device (``warmed``: calibration's own)."""
    client = session.client
    untimed = 0 if warmed else 1
    times = []
    for index in range(repeats + untimed):
        start = time.perf_counter()
        futures = [
            client.submit(
                _chunk_report,
                name,
                index * steps_per_task,
                steps_per_task,
                workers=[address],
                pure=False,
                key=f"dtrain-calibrate-dispatch-{index}-{rank}-{session.run_id}",
            )
            for rank, (name, address) in enumerate(zip(session.device_names, session.addresses))
        ]
        for report in client.gather(futures):
            sorted(report["events"], key=lambda event: event.start)
        times.append(time.perf_counter() - start)
    return statistics.median(times[untimed:])


def cluster_signature(kind: str, device_names: Sequence[str], hosts: Sequence[str]) -> str:
    """Names the cluster a calibration holds for: this library's numpy, the machine, the
    devices and which host each is on. The same signature reads the cached calibration."""
    text = "|".join(
        [
            CALIBRATION_FORMAT,
            kind,
            np.__version__,
            platform.machine(),
            platform.processor() or "",
            *device_names,
            *hosts,
        ]
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _all_timed(known: Calibration, devices: Sequence[str], graphs: Sequence[Graph]) -> bool:
    signatures = {
        op_signature(graph, node)
        for graph in graphs
        for node in graph.nodes
        if node.op not in ("placeholder", "constant")
    }
    return all(not known.missing_signatures(device, signatures) for device in devices)


def covers(
    known: Calibration,
    devices: Sequence[str],
    graphs: Sequence[Graph],
    wires: Sequence[str] = WIRES,
    link_sizes: Sequence[int] = TRANSFER_SIZES,
) -> bool:
    """Whether ``known`` has all that calibrating ``devices`` for ``graphs`` would measure:
    every node timed on every device, each of ``wires`` fitted to at least ``link_sizes``
    (between two devices or more) and the dispatch round. Then nothing is measured again."""
    if len(devices) > 1 and not (
        set(link_sizes) <= set(known.link_sizes) and all(known.has_wire(w) for w in wires)
    ):
        return False
    return bool(known.dispatch_seconds) and _all_timed(known, devices, graphs)


def in_process_signature(device_name: str, kind: str) -> str:
    return cluster_signature(kind, [device_name], [platform.node(), "in-process"])


def session_signature(session: ClusterSession) -> str:
    hosts = [address.split("://")[-1].rsplit(":", 1)[0] for address in session.addresses]
    return cluster_signature(session.device_type, session.device_names, hosts)


def calibrate_in_process(
    graphs: Sequence[Graph], device_name: str, kind: str, known: Calibration | None = None
) -> Calibration:
    """This process as the one device (one-device runs): its node times and overhead."""
    if known is not None and _all_timed(known, [device_name], graphs):
        return known
    start = time.perf_counter()
    skip = sorted(known.op_seconds.get(device_name, {})) if known is not None else ()
    measured = measure_device(graphs, kind, repeats=5, skip=skip)
    calibration = Calibration(
        signature=in_process_signature(device_name, kind),
        devices=(device_name,),
        op_seconds={device_name: measured["op_seconds"]},
        add_bytes_per_second={device_name: measured["add_bytes_per_second"]},
        step_overhead_seconds=(
            {device_name: measured["step_overhead_seconds"]}
            if measured["step_overhead_seconds"] is not None
            else {}
        ),
        step_variation={device_name: measured["step_variation"]},
        device_hosts={device_name: measured["host"]},
        host_cores={measured["host"]: float(measured["cores"])},
        measured_seconds=time.perf_counter() - start,
    )
    return known.merged(calibration) if known is not None else calibration


def calibrate_session(
    session: ClusterSession,
    graphs: Sequence[Graph],
    known: Calibration | None = None,
    repeats: int = 3,
    stall_timeout: float = 60.0,
    steps_per_task: int = 20,  # workbench/parallel/step_loop.py's STEPS_PER_TASK
    wires: Sequence[str] = WIRES,
    link_sizes: Sequence[int] = TRANSFER_SIZES,
) -> Calibration:
    """Measure what ``known`` (a cached calibration of the same cluster) lacks: the nodes of
    ``graphs`` not yet timed on each device, and, if ``known`` has none (or fitted them to
    other sizes than :data:`TRANSFER_SIZES`), the links between each pair of devices and the
    dispatch cost."""
    start = time.perf_counter()
    client, names = session.client, session.device_names
    kind = session.device_type
    signature = session_signature(session)
    known = known if known is not None and known.signature == signature else None
    if known is not None and known.links and not set(link_sizes) <= set(known.link_sizes):
        # Links fitted to fewer sizes than these are measured again, every wire of them.
        known = Calibration(**{**known.__dict__, "links": {}, "link_sizes": ()})
    wires_wanted = [wire for wire in wires if not (known and known.has_wire(wire))]
    if known is not None and not wires_wanted and _all_timed(known, names, graphs):
        return known  # nothing new to measure: a second run of this model on this cluster
    # Devices time their nodes a host's worth of cores at a time: as many at once as can
    # compute at once, so a time includes what computing neighbours cost (memory bandwidth),
    # while sharing a core, which the simulator models itself, stays out of it. (The cores
    # are this process's: the local cluster's; a remote cluster is taken to be alike.)
    at_once = max(1, usable_cores()) if kind == "cpu" else len(names)
    # All devices at once: each times its links in the same task, after its nodes.
    wires_with_nodes = at_once >= len(names) and len(names) > 1 and bool(wires_wanted)
    measured, wire_rows = [], []
    for first in range(0, len(names), at_once):
        futures = [
            client.submit(
                measure_device_and_wires,
                list(graphs),
                kind,
                repeats,
                sorted((known.op_seconds.get(name, {}) if known else {}).keys()),
                _wire_arguments(session, rank, wires_wanted, repeats, stall_timeout, link_sizes)
                if wires_with_nodes
                else None,
                workers=[address],
                pure=False,
                key=f"dtrain-calibrate-ops-{rank}-{session.run_id}",
            )
            for rank, (name, address) in enumerate(zip(names, session.addresses))
            if first <= rank < first + at_once
        ]
        for device, rows in client.gather(futures):
            measured.append(device)
            wire_rows.append(rows)
    calibration = Calibration(
        signature=signature,
        devices=tuple(names),
        op_seconds={name: m["op_seconds"] for name, m in zip(names, measured)},
        add_bytes_per_second={name: m["add_bytes_per_second"] for name, m in zip(names, measured)},
        step_overhead_seconds={
            name: m["step_overhead_seconds"]
            for name, m in zip(names, measured)
            if m["step_overhead_seconds"] is not None
        },
        step_variation={name: m["step_variation"] for name, m in zip(names, measured)},
        device_hosts={name: m["host"] for name, m in zip(names, measured)},
        host_cores={m["host"]: float(m["cores"]) for m in measured},
        device_addresses=dict(zip(names, session.addresses)),
    )
    calibration.links.update(
        _fitted_wires(session, wire_rows)
        if wires_with_nodes
        else _measure_wires(session, wires_wanted, repeats, stall_timeout, link_sizes)
    )
    if wires_wanted:
        calibration.link_sizes = tuple(link_sizes)
    if known is None or not known.dispatch_seconds:
        # Several rounds: one round's time swings with whatever else the host ran meanwhile.
        calibration.dispatch_seconds = measure_dispatch(
            session, steps_per_task, repeats=DISPATCH_ROUNDS, warmed=True
        )
    calibration.measured_seconds = time.perf_counter() - start
    return known.merged(calibration) if known is not None else calibration


def measure_wires(
    run_id: str,
    rank: int,
    addresses: list[str],
    device_names: list[str],
    wires: Sequence[str],
    repeats: int,
    stall_timeout: float,
    sizes: Sequence[int] = TRANSFER_SIZES,
) -> list[tuple[str, int, int, int, float]]:
    """Task on every device: each wire of ``wires`` in turn (ping-pongs between every pair
    for ``peer`` and ``rpc``, ring shifts for ``ring``). Returns ``(wire, source, destination,
    bytes, seconds)`` rows."""
    count = len(addresses)
    pairs = [(s, d) for s in range(count) for d in range(count) if s != d]
    rows = []
    for wire in wires:
        wire_run = f"{run_id}-{wire}"
        if wire == "ring":
            found = measure_ring_shifts(
                wire_run, rank, addresses, device_names, repeats, stall_timeout, sizes
            )
        else:
            found = measure_transfers(
                wire_run,
                rank,
                addresses,
                device_names,
                pairs,
                repeats,
                stall_timeout,
                shared_memory=wire == "peer",
                sizes=sizes,
            )
        rows += [(wire, *row) for row in found]
    return rows


def measure_device_and_wires(
    graphs: Sequence[Graph],
    kind: str,
    repeats: int,
    skip: Sequence[str],
    wire_arguments: tuple | None,
) -> tuple[dict[str, Any], list[tuple[str, int, int, int, float]]]:
    """Task on every device: :func:`measure_device`, then, given ``wire_arguments`` (when
    every device times its nodes at once, all are free for the ping-pongs once done),
    :func:`measure_wires` in the same task: a round of tasks fewer at a run's start."""
    device = measure_device(graphs, kind, repeats, skip)
    return device, measure_wires(*wire_arguments) if wire_arguments else []


def _wire_arguments(
    session: ClusterSession,
    rank: int,
    wires: Sequence[str],
    repeats: int,
    stall_timeout: float,
    sizes: Sequence[int],
) -> tuple:
    """:func:`measure_wires`'s arguments for ``rank``."""
    return (
        f"{session.run_id}-calibrate",
        rank,
        session.addresses,
        session.device_names,
        list(wires),
        repeats,
        stall_timeout,
        list(sizes),
    )


def _fitted_wires(session: ClusterSession, gathered: Sequence[Sequence[tuple]]) -> dict:
    """Every device's :func:`measure_wires` rows, a link fitted per wire and pair."""
    samples: dict[tuple[str, int, int], list[tuple[int, float]]] = {}
    for rows in gathered:
        for wire, source, destination, size, seconds in rows:
            samples.setdefault((wire, source, destination), []).append((size, seconds))
    names = session.device_names
    return {
        link_key(names[source], names[destination], wire): fit_link(points)
        for (wire, source, destination), points in samples.items()
    }


def _measure_wires(
    session: ClusterSession,
    wires: Sequence[str],
    repeats: int,
    stall_timeout: float,
    sizes: Sequence[int],
) -> dict:
    """The links of each wire between the session's devices, fitted (one round of tasks)."""
    if len(session.addresses) < 2 or not wires:
        return {}
    futures = [
        session.client.submit(
            measure_wires,
            *_wire_arguments(session, rank, wires, repeats, stall_timeout, sizes),
            workers=[address],
            pure=False,
            key=f"dtrain-calibrate-links-{rank}-{session.run_id}",
        )
        for rank, address in enumerate(session.addresses)
    ]
    return _fitted_wires(session, session.client.gather(futures))
