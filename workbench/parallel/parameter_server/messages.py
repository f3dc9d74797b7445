"""What a pull and a push carry: the tensors of the Send/Recv pairs between one worker and
one shard, in the partition's transfer order.

A pull is one flat array (every variable value the shard sends that worker, concatenated). A
push (:class:`PushMessage`) is the dense gradients concatenated likewise, and, by transfer
position, the rest: for a row-sparse gradient (an embedding's) an IndexedSlices-style
``(row indices, rows)`` pair holding only the rows that are non-zero, which are the rows the
batch looked up; with ``--compression`` the codec's :class:`Payload` (fp16/bf16, top-k or
PowerSGD, with the worker's error feedback) for every gradient that is not row-sparse. The
shard turns every entry back into a dense tensor before it sums and applies, so dense and
sparse pushes give the same bits.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import numpy as np

from workbench.parallel.collectives.compression import Payload, PushEncoder, decode
from workbench.passes import Transfer

Key = TypeVar("Key", bound=Hashable)


def unpack_pull(flat: Any, transfers: Sequence[Transfer], keys: Sequence[Key]) -> dict[Key, Any]:
    """Views of ``flat`` under ``keys`` (the receiver's own keys for the same transfers).

    Examples
    --------
    >>> from workbench.ir import Value
    >>> t = [Transfer("a", Value("a"), "ps", "w", 16, (2,)),
    ...      Transfer("b", Value("b"), "ps", "w", 8, (1,))]
    >>> parts = unpack_pull(np.arange(3.0), t, ["x", "y"])
    >>> parts["x"], parts["y"]
    (array([0., 1.]), array([2.]))
    """
    out: dict[Key, Any] = {}
    offset = 0
    for transfer, key in zip(transfers, keys):
        size = math.prod(transfer.shape)
        out[key] = flat[offset : offset + size].reshape(transfer.shape)
        offset += size
    return out


@dataclass(frozen=True)
class PushMessage:
    """One push: the dense gradients concatenated in transfer order (one array on the wire,
    as a pull), and the other entries by transfer position: row-sparse ``(indices, rows)``
    pairs and compressed :class:`Payload` s."""

    dense: Any | None
    others: Mapping[int, Any]

    @property
    def nbytes(self) -> int:
        """Bytes on the wire (a sparse entry's indices included)."""
        dense = 0 if self.dense is None else int(self.dense.nbytes)
        return dense + sum(_entry_bytes(entry) for entry in self.others.values())

    def adopted(self, arrays: Any) -> PushMessage:
        """This message with its arrays on ``arrays``' device (``DeviceArrays.adopt``)."""
        return self._moved(arrays.adopt)

    def for_the_wire(self, arrays: Any, wire: str) -> PushMessage:
        """This message as it may go to Dask's comms (``DeviceArrays.for_the_wire``)."""
        return self._moved(lambda array: arrays.for_the_wire(array, wire))

    def _moved(self, move: Any) -> PushMessage:
        dense = None if self.dense is None else move(self.dense)
        return PushMessage(dense, {p: _move(e, move) for p, e in self.others.items()})


def dense_parts(
    gradients: Mapping[str, Any],
    transfers: Sequence[Transfer],
    row_sparse,
    encoder: PushEncoder | None = None,
) -> list[Any] | None:
    """The gradients of a push that is dense throughout, in transfer order, for the
    transport to pack where it sends them (no packed copy first); None when some entry is
    row-sparse or compressed (:func:`encode_push` then)."""
    if not transfers or encoder is not None or any(t.key in row_sparse for t in transfers):
        return None
    return [gradients[t.key] for t in transfers]


def encode_push(
    gradients: Mapping[str, Any],
    transfers: Sequence[Transfer],
    row_sparse,
    xp: Any = np,
    encoder: PushEncoder | None = None,
) -> PushMessage:
    """The push of ``gradients`` (by transfer key): ``(indices, rows)`` for a key in
    ``row_sparse``, the ``encoder``'s :class:`Payload` (``--compression``) for the others if
    there is one, else the dense gradients, packed."""
    dense: list[Any] = []
    others: dict[int, Any] = {}  # (indices, rows) or a Payload, by position
    for position, transfer in enumerate(transfers):
        value = gradients[transfer.key]
        if transfer.key in row_sparse:
            touched = xp.flatnonzero(xp.any(value.reshape(value.shape[0], -1) != 0, axis=1))
            others[position] = (touched, value[touched])
        elif encoder is not None:
            others[position] = encoder.encode(transfer.key, value)
        else:
            dense.append(value.reshape(-1))
    return PushMessage(xp.concatenate(dense) if dense else None, others)


def decode_push(message: PushMessage, transfers: Sequence[Transfer], xp: Any = np) -> list:
    """The dense gradient of every transfer of ``message``, in order (the packed ones are
    views into ``message.dense``)."""
    views = _packed_views(message.dense, transfers, message.others)
    return [
        decode_entry(message.others[p], t.shape, xp) if p in message.others else next(views)
        for p, t in enumerate(transfers)
    ]


def average_pushes(
    messages: Sequence[PushMessage], transfers: Sequence[Transfer], scale: Any, xp: Any = np
) -> list:
    """``scale`` times the sum of the workers' pushes (in their order: a reproducible sum),
    per transfer: the packed gradients summed as one array, the others densified first."""
    first, *rest = messages
    total = None
    if first.dense is not None:
        # A new array in the first pass (the pushes may be read-only views of what arrived).
        total = first.dense + rest[0].dense if rest else first.dense * scale
        for message in rest[1:]:
            total += message.dense
        if rest:
            total *= scale
    views = _packed_views(total, transfers, first.others)
    out = []
    for position, transfer in enumerate(transfers):
        if position not in first.others:
            out.append(next(views))
            continue
        pushed = [decode_entry(m.others[position], transfer.shape, xp) for m in messages]
        summed = pushed[0].copy()
        for gradient in pushed[1:]:
            summed += gradient
        summed *= scale
        out.append(summed)
    return out


def decode_entry(entry: Any, shape: Sequence[int], xp: Any = np) -> Any:
    """The dense gradient of a row-sparse pair or a compressed payload."""
    if isinstance(entry, Payload):
        return decode(entry)
    indices, rows = entry
    dense = xp.zeros(tuple(shape), dtype=rows.dtype)
    dense[indices] = rows
    return dense


def _packed_views(flat: Any, transfers: Sequence[Transfer], others: Mapping[int, Any]):
    """An iterator over ``flat``'s views, one per transfer not among ``others``, in order."""
    packed = [t for p, t in enumerate(transfers) if p not in others]
    return iter(unpack_pull(flat, packed, range(len(packed))).values() if packed else ())


def _move(entry: Any, move: Any) -> Any:
    if isinstance(entry, Payload):
        return replace(entry, arrays=tuple(move(array) for array in entry.arrays))
    return tuple(move(part) for part in entry)


def _entry_bytes(entry: Any) -> int:
    return entry.nbytes if isinstance(entry, Payload) else sum(int(p.nbytes) for p in entry)


def dense_bytes(transfers: Sequence[Transfer]) -> int:
    """What the same push would be uncompressed and dense."""
    return sum(transfer.nbytes for transfer in transfers)
