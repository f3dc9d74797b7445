"""The mesh search's space: every ``dp x tp x pp`` that divides the device count, with the
pipeline schedules, micro-batch counts and virtual stages worth predicting for it, and every
mesh left out with the reason (docs/guide/planning.md, "Searching the mesh").

A mesh is left out before anything is predicted when the run could not take it or it cannot
pay:

- ``tp`` larger than a host's devices: the tensor group's all-reduces, two per split pair and
  pass, would cross the network (Megatron keeps tensor parallelism inside a node);
- ``tp`` the model's split layers cannot take (``tensor_plan`` refuses it, as ``--mesh`` does:
  a width, the heads or the vocabulary it does not divide, or a stage with no layer to split);
- more stages than layers; a batch the replicas cannot share evenly.

Each mesh kept is predicted with a bounded set of pipelines: with one stage, one micro-batch
(no pipeline); with ``pp`` stages, ``M`` in ``pp, 2pp, 4pp, 8pp`` micro-batches that divide the
replica's batch, under GPipe, 1F1B, zero-bubble and interleaved 1F1B with 2 and 4 virtual
stages where ``V x pp`` chunks fit in the layers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from workbench.config import ConfigError
from workbench.models import Sequential
from workbench.parallel.mesh import MeshShape, meshes_of
from workbench.parallel.pipeline.mesh_stage import stage_plans

# Micro-batches per replica, as multiples of the stage count (at least one per stage).
MICROBATCH_MULTIPLES = (1, 2, 4, 8)
VIRTUAL_STAGE_CHOICES = (2, 4)
SCHEDULES = ("gpipe", "1f1b", "zero-bubble")
INTERLEAVED = "interleaved-1f1b"


@dataclass(frozen=True)
class MeshCandidate:
    """One configuration the search predicts: the mesh and its pipeline."""

    mesh: MeshShape
    microbatches: int
    schedule: str
    virtual_stages: int = 1

    def options(self) -> dict[str, object]:
        """The run options that make this configuration (``--mesh``, ``--microbatches``,
        ``--schedule``, ``--virtual-stages``)."""
        options: dict[str, object] = {
            "mesh": str(self.mesh),
            "microbatches": self.microbatches,
            "schedule": self.schedule,
        }
        if self.schedule == INTERLEAVED:
            options["virtual_stages"] = self.virtual_stages
        return options


# Why a mesh is left out, in a word each (the table's summary counts them).
STAGES, HOSTS, BATCH, SPLIT, MICROBATCHES = (
    "more stages than layers",
    "tensor group across hosts",
    "batch not divisible",
    "layers not split by tp",
    "no micro-batch count",
)


@dataclass(frozen=True)
class PrunedMesh:
    """A mesh the search leaves out, why (``reason``) and which kind of reason (``kind``)."""

    mesh: MeshShape
    reason: str
    kind: str = ""


@dataclass(frozen=True)
class SearchSpace:
    candidates: tuple[MeshCandidate, ...]
    pruned: tuple[PrunedMesh, ...]


def mesh_space(
    model: Sequential, batch: int, devices: int, devices_per_host: int | None
) -> SearchSpace:
    """The configurations worth predicting for ``model`` at global ``batch`` on ``devices``
    devices (``devices_per_host``: a host's devices, None when they all share one), and the
    meshes left out with their reasons (see the module docstring).

    Examples
    --------
    >>> from workbench.models import mlp
    >>> space = mesh_space(mlp((8,), 2, (16, 16)), 16, 4, 2)
    >>> sorted({str(c.mesh) for c in space.candidates})
    ['dp=1,tp=2,pp=2', 'dp=2,tp=1,pp=2', 'dp=2,tp=2,pp=1', 'dp=4,tp=1,pp=1']
    >>> [(str(p.mesh), p.kind) for p in space.pruned]
    [('dp=1,tp=1,pp=4', 'more stages than layers'), ('dp=1,tp=4,pp=1', 'tensor group across hosts')]
    """
    candidates: list[MeshCandidate] = []
    pruned: list[PrunedMesh] = []
    for mesh in meshes_of(devices):
        refused = _refusal(model, batch, mesh, devices_per_host)
        if refused is not None:
            pruned.append(refused)
            continue
        found = pipelines(model, batch, mesh)
        if not found:
            pruned.append(
                PrunedMesh(
                    mesh,
                    f"no micro-batch count of at least {mesh.pp} divides the replica's batch "
                    f"of {batch // mesh.dp}",
                    MICROBATCHES,
                )
            )
        candidates += found
    return SearchSpace(tuple(candidates), tuple(pruned))


def _refusal(
    model: Sequential, batch: int, mesh: MeshShape, devices_per_host: int | None
) -> PrunedMesh | None:
    layers = len(model.layers)
    if mesh.pp > layers:
        return PrunedMesh(
            mesh,
            f"pp={mesh.pp}: {mesh.pp} stages need at least as many layers; the model has {layers}",
            STAGES,
        )
    if devices_per_host is not None and mesh.tp > devices_per_host:
        return PrunedMesh(
            mesh,
            f"tp={mesh.tp}: a tensor group would span hosts ({devices_per_host} devices per "
            "host); its all-reduces, two per split pair and pass, stay inside a host",
            HOSTS,
        )
    if batch % mesh.dp:
        return PrunedMesh(
            mesh,
            f"dp={mesh.dp}: the batch of {batch} does not split evenly over {mesh.dp} replicas",
            BATCH,
        )
    if mesh.tp > 1:
        try:
            stage_plans(model, mesh.tp, mesh.pp)
        except ConfigError as error:
            return PrunedMesh(mesh, f"tp={mesh.tp}: {_message(error)}", SPLIT)
    return None


def pipelines(model: Sequential, batch: int, mesh: MeshShape) -> list[MeshCandidate]:
    """The pipelines predicted on ``mesh`` (see the module docstring)."""
    replica_batch = batch // mesh.dp
    if mesh.pp == 1:
        return [MeshCandidate(mesh, 1, "1f1b")]
    found = []
    for multiple in MICROBATCH_MULTIPLES:
        microbatches = multiple * mesh.pp
        if microbatches > replica_batch or replica_batch % microbatches:
            continue
        found += [MeshCandidate(mesh, microbatches, schedule) for schedule in SCHEDULES]
        for virtual in _virtual_stages(model, mesh):
            found.append(MeshCandidate(mesh, microbatches, INTERLEAVED, virtual))
    return found


def _virtual_stages(model: Sequential, mesh: MeshShape) -> Sequence[int]:
    """The virtual stage counts whose ``V x pp`` chunks each hold a layer and, with tensor
    parallelism, a layer to split."""
    kept = []
    for virtual in VIRTUAL_STAGE_CHOICES:
        if virtual * mesh.pp > len(model.layers):
            continue
        if mesh.tp > 1:
            try:
                stage_plans(model, mesh.tp, virtual * mesh.pp)
            except ConfigError:
                continue
        kept.append(virtual)
    return kept


def _message(error: ConfigError) -> str:
    """A refusal's text without its flag (the row names the mesh)."""
    return str(error).removeprefix(f"{error.field}: ")
