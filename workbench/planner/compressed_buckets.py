"""One bucket's exchange under ``--compression``, as simulator programs, mirroring the bucket
codecs (``parallel/collectives/compression/bucket_codecs.py``):

- ``none``: the all-reduce of the bucket;
- ``fp16``/``bf16``: scale and cast to 16 bits, the all-reduce of half the bytes (in 16 bits
  on the wire), cast back and unscale;
- ``topk:R``: select the largest R of the bucket (plus its residual), send the (index, value)
  pairs straight to every peer, scatter every rank's pairs into a dense sum;
- ``powersgd:R``: for each matrix of the bucket, P = M Q, all of P in one all-reduce,
  orthogonalise, Q = M^T P, all of Q in another, the rank-R product back; the bucket's
  vectors and small matrices in one dense all-reduce.

Bytes on the wire are exact. Compute is the codec's matrix products at the device's measured
matmul rate (through the cost model) and its elementwise passes (scaling, casting, selecting,
scattering, error feedback) at the device's measured memory rate: a reduction's add, ``a += b``,
touches three bytes per byte added, so a byte read or written costs a third of an add's byte.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from workbench.ir import GraphBuilder, ops
from workbench.parallel.collectives import Bucket
from workbench.parallel.collectives.compression import CompressionSpec
from workbench.parallel.collectives.compression.power_sgd import matrix_shape, worth_compressing
from workbench.planner.device_costs import DeviceCosts
from workbench.planner.measured_collectives import measured_allreduce
from workbench.simulate import Action, Compute, Recv, Send, allreduce_programs

INDEX_BYTES = 8  # top-k indices travel as int64
SELECT_PASSES = 8  # |x|, a partition of it, the gather, the residual kept and cleared
POWER_SGD_PASSES = 6
# Top-k's pairs go straight to every peer: simulated message by message up to this many
# devices, above as each device's time to put them all on its links.
ALL_TO_ALL_MESSAGES_UP_TO = 32  # M + residual, and residual = M - P Q^T / N (reads and writes)


def bucket_exchange(
    spec: CompressionSpec,
    bucket: Bucket,
    devices: Sequence[str],
    costs: DeviceCosts,
    algorithm: str,
    groups: Sequence[Sequence[str]] | None,
    itemsize: int,
    key: str,
    stream: str,
) -> dict[str, list[Action]]:
    """Every device's actions for ``bucket`` under ``spec`` (see the module docstring)."""
    nbytes = bucket.size * itemsize
    touch = costs.add_seconds_per_byte / 3  # seconds per byte read or written
    labels = {"phase": "allreduce", "stream": stream}

    def reduced(size: int, width: int, part: str) -> dict[str, list[Action]]:
        return allreduce_programs(
            list(devices),
            size,
            costs.add_seconds_per_byte,
            part,
            algorithm,
            groups,
            itemsize=width,
            stream=stream,
        )

    if spec.method == "none":
        measured = costs.measured_collective(algorithm, devices, groups)
        if measured is not None:
            return measured_allreduce(measured, nbytes, devices, key, **labels)
        return reduced(nbytes, itemsize, key)
    if spec.half_precision:
        half = bucket.size * 2
        # scale (read, write) and cast (read, write half); then the same back
        passes = Compute((2 * nbytes + nbytes + half) * touch, "encode", **labels)
        back = Compute((half + nbytes + 2 * nbytes) * touch, "decode", **labels)
        exchanged = reduced(half, 2, key)
        return {device: [passes, *exchanged[device], back] for device in devices}
    if spec.method == "topk":
        return _top_k(spec, bucket, devices, itemsize, touch, key, labels, costs.peer_link)
    return _power_sgd(spec, bucket, devices, costs, itemsize, touch, key, labels, reduced)


def _top_k(spec, bucket, devices, itemsize, touch, key, labels, link_of) -> dict[str, list[Action]]:
    chosen = max(1, math.ceil(spec.ratio * bucket.size))
    pair_bytes = chosen * (INDEX_BYTES + itemsize)
    select = Compute(SELECT_PASSES * bucket.size * itemsize * touch, "select", **labels)
    # A dense zero vector, then every rank's pairs read and added into it.
    scattered = bucket.size * itemsize + len(devices) * (pair_bytes + 2 * chosen * itemsize)
    scatter = Compute(scattered * touch, "scatter", **labels)
    if len(devices) > ALL_TO_ALL_MESSAGES_UP_TO:
        # N(N-1) messages are too many to simulate one by one: each device puts its pairs on
        # its links to the N-1 others one after another, and the last arrives a latency later
        # (the slowest of its links: across hosts on a described cluster). So many devices
        # are a described cluster's, alike: the first one's links stand for every device's.
        first = devices[0]
        link = max((link_of(first, peer) for peer in devices[1:]), key=_slowness)
        put = Compute(
            (len(devices) - 1) * link.put_seconds(pair_bytes) + link.latency,
            "all-to-all",
            **labels,
        )
        return {device: [select, put, scatter] for device in devices}
    programs: dict[str, list[Action]] = {}
    for device in devices:
        peers = [peer for peer in devices if peer != device]
        programs[device] = [
            select,
            *(Send(peer, pair_bytes, f"{key}/{device}->{peer}", **labels) for peer in peers),
            *(Recv(peer, f"{key}/{peer}->{device}", **labels) for peer in peers),
            scatter,
        ]
    return programs


def _slowness(link) -> tuple[float, float]:
    return (1 / link.bandwidth, link.latency)


def _power_sgd(
    spec, bucket, devices, costs, itemsize, touch, key, labels, reduced
) -> dict[str, list[Action]]:
    rank, device = spec.rank, devices[0]
    matrices = [matrix_shape(shape) for shape in bucket.shapes if worth_compressing(shape, rank)]
    dense = bucket.size - sum(rows * columns for rows, columns in matrices)
    programs: dict[str, list[Action]] = {d: [] for d in devices}
    if matrices:
        elements = sum(rows * columns for rows, columns in matrices)
        feedback = POWER_SGD_PASSES / 2 * elements * itemsize * touch  # before, and after

        p_seconds = sum(
            _matmul_seconds(costs, device, (m, n), (n, rank), itemsize) for m, n in matrices
        )
        q_seconds = sum(
            _matmul_seconds(costs, device, (n, m), (m, rank), itemsize) for m, n in matrices
        )
        back_seconds = sum(
            _matmul_seconds(costs, device, (m, rank), (rank, n), itemsize) for m, n in matrices
        )
        p_sum = reduced(sum(m * rank for m, _ in matrices) * itemsize, itemsize, f"{key}/p")
        q_sum = reduced(sum(n * rank for _, n in matrices) * itemsize, itemsize, f"{key}/q")
        for d in devices:
            programs[d] += [
                Compute(feedback + p_seconds, "P = M Q", **labels),
                *p_sum[d],
                Compute(q_seconds, "Q = M^T P", **labels),
                *q_sum[d],
                Compute(back_seconds + feedback, "P Q^T", **labels),
            ]
    if dense:
        rest = reduced(dense * itemsize, itemsize, f"{key}/dense")
        for d in devices:
            programs[d] += rest[d]
    return programs


def _matmul_seconds(costs: DeviceCosts, device: str, left, right, itemsize: int) -> float:
    """A matrix product's seconds on ``device``, as the cost model times a matmul node of these
    shapes (measured, else at the matmul rate calibration measured)."""
    dtype = {2: "float16", 4: "float32", 8: "float64"}[itemsize]
    builder = GraphBuilder()
    a = builder.placeholder("a", tuple(left), dtype)
    b = builder.placeholder("b", tuple(right), dtype)
    graph = builder.build({"c": ops.matmul(a, b)})
    return costs.node_seconds(graph, graph.nodes[-1], device)
