"""What a mesh run (``hybrid``, ``mesh``) times at its start beyond nodes and links: its data
groups' all-reduces, its tensor groups' all-reduces and its stages' hand-offs, as its devices
run them (:mod:`workbench.calibration.mesh_groups_probe`), at the sizes the run moves."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from workbench.calibration.mesh_groups_probe import measure_mesh, mesh_keys
from workbench.parallel.collectives import DEFAULT_BUCKET_BYTES
from workbench.parallel.mesh import MeshShape
from workbench.parallel.pipeline.stages import split_layers
from workbench.runtime.cluster import ClusterSession
from workbench.training.job import TrainingJob


def largest_exchanges(
    job: TrainingJob, mesh: MeshShape, microbatches: int, chunks: int
) -> dict[str, int]:
    """The biggest tensor each exchange of the run moves at once, in bytes: ``reduce``, a
    device's gradient bucket; ``tensor``, the widest activation of a micro-batch (what a tensor
    group sums is one layer's output); ``handoff``, the widest activation crossing from one
    model chunk to the next (0 without stages)."""
    config, model = job.config, job.model
    itemsize = np.dtype(config.dtype).itemsize
    micro = max(1, config.batch_size // (mesh.dp * microbatches))
    parameters = sum(math.prod(shape) for shape in model.parameter_shapes().values())
    boundaries = split_layers(model, mesh.pp * chunks)[:-1] if mesh.pp > 1 else []
    return {
        "reduce": min(DEFAULT_BUCKET_BYTES, parameters * itemsize),
        "tensor": itemsize * micro * max(math.prod(shape) for shape in model.shapes),
        "handoff": itemsize
        * max((micro * math.prod(model.shapes[b.stop]) for b in boundaries), default=0),
    }


def mesh_exchanges(
    job: TrainingJob,
    session: ClusterSession,
    mesh: MeshShape,
    microbatches: int,
    chunks: int,
) -> tuple[list[str], Callable[[list[str]], dict[str, Any]]]:
    """The calibration keys of the run's mesh exchanges, and how to measure them (for a
    strategy's ``_measure_more``)."""
    keys = mesh_keys(mesh, session.device_names)
    largest = largest_exchanges(job, mesh, microbatches, chunks)

    def measure(missing: list[str]) -> dict[str, Any]:
        fits = measure_mesh(session, mesh, largest, stall_timeout=job.config.stall_timeout)
        return {"collectives": fits}

    return keys, measure
