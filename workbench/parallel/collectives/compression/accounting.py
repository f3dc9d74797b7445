"""What compression saved, from events only (docs/architecture/events.md, "Events").

The bytes that went are the gradient phases' own (``allreduce`` events, or ``ps-push`` for
central storage). What the gradients would have been uncompressed is not measurable once they
are compressed, so each replica reports it as a ``gradient_bytes`` scalar: the bytes the same
collective sends from that rank for the same buckets at full precision
(:func:`dense_allreduce_bytes`, exact, checked against the collectives themselves in the
tests). Replica 0 also reports ``loss_scale`` every step and ``skipped_steps`` (cumulative) at
every step whose update the loss scaler skipped.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from workbench.events import EventLog
from workbench.parallel.collectives.compression.spec import parse_compression
from workbench.parallel.collectives.ring import chunk_bounds


def ring_bytes_sent(elements: int, itemsize: int, rank: int, size: int) -> int:
    """Bytes rank ``rank`` sends in ``ring_allreduce`` of ``elements`` over ``size`` ranks:
    its chunks of the reduce-scatter and of the all-gather."""
    if size == 1:
        return 0
    bounds = chunk_bounds(elements, size)
    sent = [(rank - step) % size for step in range(size - 1)]
    sent += [(rank + 1 - step) % size for step in range(size - 1)]
    return sum(bounds[chunk][1] - bounds[chunk][0] for chunk in sent) * itemsize


def dense_allreduce_bytes(
    algorithm: str,
    groups: Sequence[Sequence[int]],
    elements: int,
    itemsize: int,
    rank: int,
    size: int,
) -> int:
    """Bytes rank ``rank`` sends in ``allreduce`` (``workbench.parallel.collectives``) of
    ``elements`` items of ``itemsize`` bytes, with ``algorithm`` and ``groups``.

    Examples
    --------
    >>> dense_allreduce_bytes("ring", (), 1000, 4, rank=0, size=2)
    4000
    >>> dense_allreduce_bytes("ring", (), 1, 4, rank=0, size=2)  # one element: reduce-to-one
    4
    """
    nbytes = elements * itemsize
    if size == 1:
        return 0
    if elements < size or algorithm == "reduce-to-one":
        return (size - 1) * nbytes if rank == 0 else nbytes  # the root broadcasts
    if algorithm == "ring":
        return ring_bytes_sent(elements, itemsize, rank, size)
    if algorithm == "hierarchical-copy":
        mine = next(list(group) for group in groups if rank in group)
        if mine.index(rank) != 0:
            return nbytes  # to the group's leader; the leader's broadcast comes back
        leaders = [group[0] for group in groups]
        return (
            ring_bytes_sent(elements, itemsize, leaders.index(rank), len(leaders))
            + (len(mine) - 1) * nbytes
        )
    raise ValueError(f"no byte count for all-reduce algorithm {algorithm!r}")


def compression_summary(
    compression: str, log: EventLog, devices: Sequence[str], gradient_phase: str = "allreduce"
) -> dict[str, Any]:
    """The ``compression`` object of ``--json``: ``method``, ``gradient_bytes`` (uncompressed,
    summed over devices), ``compressed_bytes`` (what the ``gradient_phase`` events sent),
    ``ratio``, ``skipped_steps`` and, for fp16/bf16, the final ``loss_scale``."""
    spec = parse_compression(compression)
    names = set(devices)
    sent = sum(e.bytes for e in log.phases() if e.phase == gradient_phase and e.device in names)
    dense = sum(e.value for e in log.scalars("gradient_bytes") if e.device in names)
    summary: dict[str, Any] = {
        "method": spec.text,
        "gradient_bytes": int(dense),
        "compressed_bytes": int(sent),
        "ratio": dense / sent if sent else None,
        # A step recomputed after a recovery reports again: count steps, not reports.
        "skipped_steps": len({e.step for e in log.scalars("skipped_steps")}),
    }
    if spec.half_precision:
        scales = log.scalars("loss_scale")
        summary["loss_scale"] = max(scales, key=lambda e: e.step).value if scales else None
    return summary
