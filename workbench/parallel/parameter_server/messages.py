"""What a pull and a push carry: the tensors of the Send/Recv pairs between one worker and
one shard, in the partition's transfer order.

A pull is one flat array (every variable value the shard sends that worker, concatenated). A
push is a list with one entry per gradient transfer: the dense array, or for a row-sparse
gradient (an embedding's) an IndexedSlices-style ``(row indices, rows)`` pair holding only
the rows that are non-zero, which are the rows the batch looked up. With ``--compression`` a
dense entry is the codec's :class:`Payload` instead (fp16/bf16, top-k or PowerSGD, with the
worker's error feedback). The shard turns every entry back into a dense tensor before it
sums and applies, so dense and sparse pushes give the same bits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from workbench.parallel.collectives.compression import Payload, PushEncoder, decode
from workbench.passes import Transfer


def pack_pull(values: Mapping[str, Any], transfers: Sequence[Transfer], xp: Any = np) -> Any:
    """One flat array of the transfers' values (a copy: the variables change afterwards)."""
    return xp.concatenate([values[t.key].reshape(-1) for t in transfers])


def unpack_pull(flat: Any, transfers: Sequence[Transfer], keys: Sequence[str]) -> dict[str, Any]:
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
    out, offset = {}, 0
    for transfer, key in zip(transfers, keys):
        size = int(np.prod(transfer.shape, dtype=np.int64))
        out[key] = flat[offset : offset + size].reshape(transfer.shape)
        offset += size
    return out


def encode_push(
    gradients: Mapping[str, Any],
    transfers: Sequence[Transfer],
    row_sparse,
    xp: Any = np,
    encoder: PushEncoder | None = None,
) -> list[Any]:
    """One entry per transfer: the dense gradient, ``(indices, rows)`` when its key is in
    ``row_sparse``, or the ``encoder``'s compressed :class:`Payload` (``--compression``)."""
    entries = []
    for transfer in transfers:
        value = gradients[transfer.key]
        if transfer.key in row_sparse:
            touched = xp.flatnonzero(xp.any(value.reshape(value.shape[0], -1) != 0, axis=1))
            entries.append((touched, value[touched]))
        elif encoder is not None:
            entries.append(encoder.encode(transfer.key, value))
        else:
            entries.append(value)
    return entries


def adopt_entry(entry: Any, arrays: Any) -> Any:
    """A push entry as it arrived, its arrays on this device (``DeviceArrays.adopt``)."""
    if isinstance(entry, Payload):
        return replace(entry, arrays=tuple(arrays.adopt(array) for array in entry.arrays))
    if isinstance(entry, tuple):
        return tuple(arrays.adopt(part) for part in entry)
    return arrays.adopt(entry)


def decode_push(entry: Any, shape: Sequence[int], xp: Any = np) -> Any:
    """The dense gradient of one push entry."""
    if isinstance(entry, Payload):
        return decode(entry)
    if not isinstance(entry, tuple):
        return entry
    indices, rows = entry
    dense = xp.zeros(tuple(shape), dtype=rows.dtype)
    dense[indices] = rows
    return dense


def push_bytes(entries: Sequence[Any]) -> int:
    """Bytes a push puts on the wire (a sparse entry's indices included)."""
    return sum(
        sum(int(part.nbytes) for part in entry) if isinstance(entry, tuple) else int(entry.nbytes)
        for entry in entries
    )


def dense_bytes(transfers: Sequence[Transfer]) -> int:
    """What the same push would be uncompressed and dense."""
    return sum(transfer.nbytes for transfer in transfers)
