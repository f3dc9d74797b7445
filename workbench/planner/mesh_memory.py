"""A mesh device's predicted peak memory, from its chunks' costs (:class:`ChunkCost`) and its
schedule: the terms ``workbench.planner.memory`` composes (docs/guide/planning.md, "Memory per
device").

A device keeps its chunks' parameter shards and their optimizer slots. On top, at each of its
schedule's actions: the input and stash of every micro-batch in flight on each of its chunks
(from its forward until its backward, or until its weight-gradient half under zero-bubble,
which still reads them), the running graph's own live values beside them, and, once a backward
has run, its shards' summed gradients. At the end the update reads the averaged gradients (a
second buffer when a data group all-reduces them).
"""

from __future__ import annotations

from collections.abc import Sequence

from workbench.parallel.mesh import MeshShape
from workbench.parallel.pipeline.schedules import StageAction
from workbench.planner.mesh_step import ChunkCost, MeshCosting, MeshLayout


def mesh_memory(
    costing: MeshCosting,
    layout: MeshLayout,
    devices: Sequence[str],
    played: Sequence[str] | None = None,
) -> dict[str, tuple[dict[str, int], list[dict[str, int]]]]:
    """The terms (:func:`stage_memory`) of each of ``played`` (default: all ``devices``, in
    rank order): the devices of one stage hold alike."""
    mesh: MeshShape = layout.mesh
    chunks = layout.chunk_costs(costing, devices)
    actions = layout.actions()
    terms = [stage_memory(chunks[s], actions[s], mesh.dp) for s in range(mesh.pp)]
    ranks = costing.ranks(devices)
    return {
        device: terms[ranks[device] // mesh.tp % mesh.pp]
        for device in (devices[: mesh.devices] if played is None else played)
    }


def stage_memory(
    chunks: Sequence[ChunkCost], actions: Sequence[StageAction], replicas: int
) -> tuple[dict[str, int], list[dict[str, int]]]:
    """(what the device keeps between steps, the moments of its step), bytes by category.

    Examples
    --------
    >>> from workbench.planner.mesh_step import NOTHING
    >>> chunk = ChunkCost(NOTHING, NOTHING, NOTHING, NOTHING, 0, 0, 40, 0.0, 40, 80, 100, 30,
    ...                   {"activations": 10}, {"activations": 20})
    >>> steps = [StageAction("F", 0), StageAction("F", 1), StageAction("B", 0),
    ...          StageAction("B", 1)]
    >>> resident, moments = stage_memory([chunk], steps, 1)
    >>> resident, max(sum(m.values()) for m in moments)
    ({'parameters': 40, 'optimizer': 80}, 220)
    """
    resident = {
        "parameters": sum(c.parameter_bytes for c in chunks),
        "optimizer": sum(c.optimizer_bytes for c in chunks),
    }
    gradients = sum(c.shard_gradient_bytes for c in chunks)
    held = [0] * len(chunks)
    summed = 0
    moments: list[dict[str, int]] = []
    for action in actions:
        chunk = chunks[action.chunk]
        if action.kind == "F":
            held[action.chunk] += 1
        keeping = sum(count * c.kept_bytes for count, c in zip(held, chunks))
        if action.kind == "F":
            # The forward's own walk holds the stash it makes; its input is fed from outside.
            keeping += chunk.input_bytes - chunk.kept_bytes
        running = chunk.forward_peak if action.kind == "F" else chunk.backward_peak
        moment = {category: bytes_ for category, bytes_ in running.items()}
        moment["activations"] = moment.get("activations", 0) + keeping
        moment["gradients"] = moment.get("gradients", 0) + summed
        moments.append(moment)
        # A micro-batch's activations go with its backward (its weight half, when split).
        if action.kind in ("B", "W"):
            held[action.chunk] -= 1
        if action.kind in ("B", "W"):
            summed = gradients
    moments.append({"gradients": gradients * (2 if replicas > 1 else 1)})
    return resident, moments
