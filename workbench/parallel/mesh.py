"""A device mesh ``dp x tp x pp``: how many replicas, tensor-parallel ranks and pipeline stages
a run's devices form, and where each device sits in it.

Ranks are laid out tensor-innermost, then pipeline, then data (Megatron's order: the ranks
that talk most, a tensor-parallel group, are neighbours, which on a real machine means the
same host): ``rank = (replica * pp + stage) * tp + tensor``. With ``tp = 1`` this is the
``hybrid`` strategy's layout (``rank = replica * stages + stage``).
(docs/guide/distributed-training.md, "The device mesh")
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

AXES = ("dp", "tp", "pp")


class MeshError(ValueError):
    """A ``--mesh`` that does not parse; the message says what is allowed."""


class MeshPoint(NamedTuple):
    """Where a device sits: its replica (dp), tensor rank (tp) and stage (pp)."""

    replica: int
    tensor: int
    stage: int


@dataclass(frozen=True)
class MeshShape:
    dp: int = 1
    tp: int = 1
    pp: int = 1

    @property
    def devices(self) -> int:
        return self.dp * self.tp * self.pp

    def __str__(self) -> str:
        return f"dp={self.dp},tp={self.tp},pp={self.pp}"

    def rank(self, point: MeshPoint) -> int:
        """The rank of the device at ``point``.

        Examples
        --------
        >>> MeshShape(2, 2, 2).rank(MeshPoint(replica=1, tensor=0, stage=1))
        6
        """
        return (point.replica * self.pp + point.stage) * self.tp + point.tensor

    def point(self, rank: int) -> MeshPoint:
        """Where device ``rank`` sits (the inverse of :meth:`rank`).

        Examples
        --------
        >>> MeshShape(2, 2, 2).point(6)
        MeshPoint(replica=1, tensor=0, stage=1)
        """
        if not 0 <= rank < self.devices:
            raise IndexError(f"rank {rank} is outside a mesh of {self.devices} devices")
        rest, tensor = divmod(rank, self.tp)
        replica, stage = divmod(rest, self.pp)
        return MeshPoint(replica, tensor, stage)

    def tensor_group(self, rank: int) -> tuple[int, ...]:
        """The ranks that split the same layers with ``rank`` (same replica and stage)."""
        point = self.point(rank)
        return tuple(self.rank(point._replace(tensor=t)) for t in range(self.tp))

    def data_group(self, rank: int) -> tuple[int, ...]:
        """The ranks holding the same parameters as ``rank`` (same tensor rank and stage): the
        group that averages their gradients."""
        point = self.point(rank)
        return tuple(self.rank(point._replace(replica=d)) for d in range(self.dp))

    def pipeline_group(self, rank: int) -> tuple[int, ...]:
        """The ranks that hand activations on to one another with ``rank``, stage by stage."""
        point = self.point(rank)
        return tuple(self.rank(point._replace(stage=s)) for s in range(self.pp))


def parse_mesh(text: str) -> MeshShape:
    """``dp=2,tp=2,pp=2`` (any order; an axis left out is 1; ``x`` also separates:
    ``dp=2xtp=4``).

    Examples
    --------
    >>> parse_mesh("tp=4,dp=2")
    MeshShape(dp=2, tp=4, pp=1)
    >>> parse_mesh("dp=2,tp=0")
    Traceback (most recent call last):
    ...
    workbench.parallel.mesh.MeshError: tp=0: each axis's size must be a whole number >= 1
    """
    sizes: dict[str, int] = {}
    for part in text.replace("x", ",").split(","):
        name, equals, size = part.strip().partition("=")
        name = name.strip().lower()
        if not equals or name not in AXES:
            raise MeshError(
                f"{part.strip()!r} is not AXIS=SIZE with AXIS one of {', '.join(AXES)} "
                "(e.g. dp=2,tp=2,pp=2)"
            )
        if name in sizes:
            raise MeshError(f"{name} is given twice")
        try:
            sizes[name] = int(size)
        except ValueError:
            sizes[name] = 0
        if sizes[name] < 1:
            raise MeshError(f"{name}={size.strip()}: each axis's size must be a whole number >= 1")
    return MeshShape(**sizes)


def canonical_mesh(text: str) -> str:
    """The mesh as ``dp=A,tp=B,pp=C`` (what the ``--mesh`` option stores)."""
    return str(parse_mesh(text))


def meshes_of(devices: int) -> list[MeshShape]:
    """Every ``dp x tp x pp`` whose product is ``devices`` (the planner's search space before
    it prunes by the model).

    Examples
    --------
    >>> [str(m) for m in meshes_of(4)]  # doctest: +NORMALIZE_WHITESPACE
    ['dp=1,tp=1,pp=4', 'dp=1,tp=2,pp=2', 'dp=1,tp=4,pp=1', 'dp=2,tp=1,pp=2', 'dp=2,tp=2,pp=1',
     'dp=4,tp=1,pp=1']
    """
    divisors = [d for d in range(1, devices + 1) if devices % d == 0]
    return [
        MeshShape(dp, tp, devices // (dp * tp))
        for dp in divisors
        for tp in divisors
        if (devices // dp) % tp == 0
    ]
