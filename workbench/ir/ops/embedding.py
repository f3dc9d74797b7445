"""Embedding lookup (a row gather) and its scatter-add gradient; each is the other's adjoint.

With ``start``, the table holds rows ``[start, start + rows)`` of a larger vocabulary (a
tensor-parallel rank's vocabulary shard): an id outside that range looks up zeros, and its
gradient goes nowhere, so the ranks' lookups sum to the whole table's
(docs/guide/distributed-training.md, "Tensor parallelism").
"""

from __future__ import annotations

import numpy as np

from workbench.ir.builder import Tensor
from workbench.ir.graph import TensorType
from workbench.ir.ops._common import emit, in_float32
from workbench.ir.rules import ShapeError, define_op, require_float


def embedding(ids: Tensor, table: Tensor, start: int | None = None) -> Tensor:
    """Rows of ``table`` (V, D) picked by integer ``ids`` of any shape -> ids.shape + (D,);
    with ``start``, row ``i`` of the table is id ``start + i`` and other ids give zeros."""
    if start is None:
        return emit("embedding", ids, table)
    return emit("embedding", ids, table, start=start)


def embedding_grad(ids: Tensor, g: Tensor, vocabulary: int, start: int | None = None) -> Tensor:
    if start is None:
        return emit("embedding_grad", ids, g, vocabulary=vocabulary)
    return emit("embedding_grad", ids, g, vocabulary=vocabulary, start=start)


def _local_ids(xp, ids, start, rows):
    """Each id's row in a table of ``rows`` rows from ``start`` (0 where outside), and
    whether it is inside."""
    local = ids - start
    inside = (local >= 0) & (local < rows)
    return xp.where(inside, local, 0), inside


def _embedding_impl(xp, ids, table, *, start=None):
    if start is None:
        return table[ids]
    local, inside = _local_ids(xp, ids, start, table.shape[0])
    return table[local] * inside[..., None].astype(table.dtype)


def _embedding_shape(types, *, start=None):
    ids, table = types
    if not ids.dtype.startswith("int"):
        raise ShapeError(f"embedding: ids must be integers, got {ids}")
    require_float("embedding", table)
    if len(table.shape) != 2:
        raise ShapeError(f"embedding: table must be (vocabulary, width), got {table}")
    return TensorType((*ids.shape, table.shape[1]), table.dtype)


def _scatter_add_rows(xp, ids, rows, vocabulary):
    out = xp.zeros((vocabulary, rows.shape[-1]), dtype=rows.dtype)
    flat_ids = ids.reshape(-1)
    flat_rows = rows.reshape(-1, rows.shape[-1])
    if hasattr(xp.add, "at"):  # NumPy (and array modules whose ufuncs have ``at``)
        xp.add.at(out, flat_ids, flat_rows)
    else:  # CuPy's scatter_add is its atomic-add kernel for exactly this
        import cupyx

        cupyx.scatter_add(out, flat_ids, flat_rows)
    return out


def _embedding_grad_impl(xp, ids, g, *, vocabulary, start=None):
    if start is not None:
        ids, inside = _local_ids(xp, ids, start, vocabulary)
        g = g * inside[..., None].astype(g.dtype)
    # CuPy's add.at has no bfloat16 kernel (CuPy 14 supports float16, float32, float64): sum
    # bfloat16 rows in float32 there.
    bfloat16_on_gpu = xp is not np and g.dtype.name == "bfloat16"
    return in_float32(lambda g: _scatter_add_rows(xp, ids, g, vocabulary), g, widen=bfloat16_on_gpu)


def _embedding_grad_shape(types, *, vocabulary, start=None):
    ids, g = types
    if g.shape[:-1] != ids.shape:
        raise ShapeError(f"embedding_grad: gradient {g} does not match ids {ids}")
    return TensorType((vocabulary, g.shape[-1]), g.dtype)


define_op(
    "embedding",
    impl=_embedding_impl,
    shape=_embedding_shape,
    vjp=lambda inputs, outputs, cts, *, start=None: [
        None,
        embedding_grad(inputs[0], cts[0], inputs[1].shape[0], start),
    ],
)
define_op(
    "embedding_grad",
    impl=_embedding_grad_impl,
    shape=_embedding_grad_shape,
    vjp=lambda inputs, outputs, cts, *, vocabulary, start=None: [
        None,
        embedding(inputs[0], cts[0], start),
    ],
)
