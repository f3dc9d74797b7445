"""Placing variables on parameter-server shards, balanced by size, optionally split in parts.

Greedy "largest first onto the least loaded shard" (the LPT rule), so shards carry similar
bytes and therefore similar traffic. Ties break by shard index, so placement is deterministic.

A variable of at least twice ``--ps-partition-min-bytes`` is split along its first axis, as
TF's ``min_max_variable_partitioner`` does: ``min(shards, rows, bytes // min_bytes)`` parts,
so each part holds at least ``min_bytes``, the first ``rows % parts`` parts one row more than
the others, and the parts of one variable on different shards. A part lives in its shard's
store as ``<variable>/part_<j>`` (with its optimizer slots under that name); the client joins
the parts again for checkpoints and the final variables.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class VariablePiece:
    """A whole variable, or one part of a partitioned one, and the shard holding it."""

    variable: str  # the model's parameter name
    name: str  # its name in the shard's store: the variable's, or "<variable>/part_<j>"
    rows: tuple[int, int]  # [begin, end) along the first axis
    shape: tuple[int, ...]
    shard: int

    @property
    def is_part(self) -> bool:
        return self.name != self.variable


def part_count(shape: Sequence[int], itemsize: int, shards: int, min_bytes: int | None) -> int:
    """How many parts TF's ``min_max_variable_partitioner(max_partitions=shards,
    min_slice_size=min_bytes)`` cuts a variable into.

    Examples
    --------
    >>> part_count((1000, 16), 8, 3, 40_000)   # 128,000 bytes: 3 parts of >= 40,000
    3
    >>> part_count((1000, 16), 8, 3, 100_000)  # only one 100,000-byte slice fits
    1
    >>> part_count((512,), 8, 3, None)
    1
    """
    if min_bytes is None or not shape:
        return 1
    nbytes = int(np.prod(shape)) * itemsize
    return max(1, min(shards, int(shape[0]), nbytes // max(min_bytes, 1)))


def place_variables(
    shapes: Mapping[str, Sequence[int]],
    shards: int,
    itemsize: int = 8,
    min_bytes: int | None = None,
) -> list[VariablePiece]:
    """Every variable's pieces, in the model's parameter order (parts in row order).

    Examples
    --------
    >>> pieces = place_variables({"table": (10, 4), "bias": (4,)}, 2, 8, min_bytes=100)
    >>> [(p.name, p.rows, p.shard) for p in pieces]
    [('table/part_0', (0, 5), 0), ('table/part_1', (5, 10), 1), ('bias', (0, 4), 0)]
    """
    if shards < 1:
        raise ValueError(f"--ps: needs at least one shard, got {shards}")
    pieces: list[tuple[str, str, tuple[int, int], tuple[int, ...]]] = []
    for variable, shape in shapes.items():
        shape = tuple(int(s) for s in shape)
        parts = part_count(shape, itemsize, shards, min_bytes)
        if parts == 1:
            pieces.append((variable, variable, (0, shape[0] if shape else 0), shape))
            continue
        base, extra = divmod(shape[0], parts)
        begin = 0
        for j in range(parts):
            end = begin + base + (1 if j < extra else 0)
            pieces.append(
                (variable, f"{variable}/part_{j}", (begin, end), (end - begin, *shape[1:]))
            )
            begin = end
    loads = [0] * shards
    owner: dict[str, int] = {}
    by_size = sorted(pieces, key=lambda piece: -int(np.prod(piece[3])))
    for variable, name, _, shape in by_size:
        # A variable's parts go to different shards (that is the point of splitting it).
        taken = {owner[other] for v, other, _, _ in pieces if v == variable and other in owner}
        free = [s for s in range(shards) if s not in taken] or list(range(shards))
        shard = min(free, key=lambda s: (loads[s], s))
        owner[name] = shard
        loads[shard] += int(np.prod(shape))
    return [VariablePiece(v, name, rows, shape, owner[name]) for v, name, rows, shape in pieces]


def partition_variables(shapes: Mapping[str, Sequence[int]], shards: int) -> list[list[str]]:
    """Variable names per shard (each list in the model's parameter order), none split.

    Examples
    --------
    >>> partition_variables({"a": (100,), "b": (60,), "c": (50,), "d": (10,)}, 2)
    [['a', 'd'], ['b', 'c']]
    """
    pieces = place_variables(shapes, shards)
    return [[p.name for p in pieces if p.shard == shard] for shard in range(shards)]


def shard_bytes(pieces: Sequence[VariablePiece], shards: int, itemsize: int) -> list[int]:
    """The bytes of variables each shard holds: what a worker pulls from it, and pushes.

    Examples
    --------
    >>> shard_bytes(place_variables({"a": (100,), "b": (60,), "c": (50,)}, 2, 4), 2, 4)
    [400, 440]
    """
    held = [0] * shards
    for piece in pieces:
        held[piece.shard] += int(np.prod(piece.shape)) * itemsize
    return held


def split_state(
    pieces: Sequence[VariablePiece], parameters: Mapping[str, Any], slots: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """Each shard's store: its pieces' values and optimizer slots (a part's slots are the
    same rows of the variable's; scalar slots, such as Adam's step count, are copied)."""
    stores: list[dict[str, Any]] = [{} for _ in range(1 + max(p.shard for p in pieces))]
    for piece in pieces:
        begin, end = piece.rows
        store = stores[piece.shard]
        store[piece.name] = _rows(parameters[piece.variable], begin, end, piece)
        for slot, value in slots.items():
            owner, _, kind = slot.rpartition("/")
            if owner == piece.variable:
                store[f"{piece.name}/{kind}"] = _rows(value, begin, end, piece)
    return stores


def _rows(value: Any, begin: int, end: int, piece: VariablePiece) -> Any:
    if not piece.is_part or np.ndim(value) == 0:
        return np.array(value, copy=True)
    return np.array(value[begin:end], copy=True)


def join_parts(pieces: Sequence[VariablePiece], values: Mapping[str, Any]) -> dict[str, Any]:
    """Store entries (parameters or slots) under the model's names: a partitioned
    variable's parts concatenated along the first axis, in row order."""
    renamed: dict[str, Any] = {}
    parts: dict[str, list[Any]] = {}
    piece_of = {p.name: p for p in pieces}
    for name, value in values.items():
        owner, suffix = _owner(name, piece_of)
        if owner is None or not owner.is_part:
            renamed[name] = value
            continue
        target = owner.variable + suffix
        if np.ndim(value) == 0:  # a scalar slot: every part holds the same count
            renamed.setdefault(target, value)
            continue
        parts.setdefault(target, []).append((owner.rows[0], value))
    for target, rows in parts.items():
        renamed[target] = np.concatenate([value for _, value in sorted(rows, key=lambda r: r[0])])
    return renamed


def _owner(name: str, piece_of: Mapping[str, VariablePiece]) -> tuple[VariablePiece | None, str]:
    """The piece a store entry belongs to, and what follows the piece's name (a slot)."""
    if name in piece_of:
        return piece_of[name], ""
    stem, _, kind = name.rpartition("/")
    if stem in piece_of:
        return piece_of[stem], f"/{kind}"
    return None, ""
