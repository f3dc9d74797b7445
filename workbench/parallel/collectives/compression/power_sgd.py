"""PowerSGD (``powersgd:RANK``; Vogels et al. 2019, "PowerSGD: Practical Low-Rank Gradient
Compression for Distributed Optimization", Algorithm 1 with error feedback and warm start).

Each gradient that is a matrix (a conv kernel is reshaped to filters x the rest, as in the
paper) is replaced by a rank-r approximation found by one step of power iteration, from the
previous step's right factor Q (the warm start that makes one step enough):

    M = gradient + residual                       each replica, its own
    P = M Q;          all-reduce P                the sum over replicas of M_i Q
    P = orthogonalize(P)                          the same bytes on every replica
    Q = M^T P;        all-reduce Q                the sum over replicas of M_i^T P
    approximation of sum(M_i) = P Q^T
    residual = M - P Q^T / N                      what this replica's share did not carry

Only P (rows x r) and Q (columns x r) travel, not rows x columns. Vectors (biases) and matrices
too small to gain, (rows + columns) r >= rows columns, go uncompressed through the normal
all-reduce. Q starts from a seed every replica shares.

P Q^T and the orthogonalization are written with elementwise products and sums, not BLAS:
their inputs are identical on every replica, and so must their outputs be, bit for bit, even
where two hosts' BLAS libraries would sum in different orders.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.runtime.devices import array_namespace


def matrix_shape(shape: Sequence[int]) -> tuple[int, int] | None:
    """The 2-D view PowerSGD compresses a tensor of ``shape`` as (first axis x the rest), or
    None for a vector or scalar."""
    if len(shape) < 2:
        return None
    rows = int(shape[0])
    return rows, int(np.prod(shape[1:]))


def worth_compressing(shape: Sequence[int], rank: int) -> bool:
    """Whether rank-``rank`` factors of a tensor of ``shape`` are smaller than the tensor.

    Examples
    --------
    >>> worth_compressing((512, 512), 2), worth_compressing((2, 100), 2), worth_compressing((9,), 1)
    (True, False, False)
    """
    matrix = matrix_shape(shape)
    if matrix is None:
        return False
    rows, columns = matrix
    return (rows + columns) * rank < rows * columns


def initial_q(columns: int, rank: int, seed: int, name: str, dtype: Any) -> np.ndarray:
    """The warm start's first Q: standard normal from the run's seed and the tensor's name
    (the same on every replica, different for every tensor)."""
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    return rng.standard_normal((columns, rank)).astype(dtype)


def orthogonalize(matrix: Any) -> Any:
    """Orthonormal columns spanning ``matrix``'s (Gram-Schmidt, column by column; a column
    that is all zero stays zero)."""
    xp = array_namespace(matrix)
    columns: list[Any] = []
    tiny = np.finfo(matrix.dtype).tiny
    for index in range(matrix.shape[1]):
        column = matrix[:, index].copy()
        for earlier in columns:
            column -= (earlier * column).sum() * earlier
        norm = xp.sqrt((column * column).sum())
        columns.append(column / (norm + tiny))
    return xp.stack(columns, axis=1)


def low_rank_product(p: Any, q: Any) -> Any:
    """``p @ q.T`` as a sum of r outer products (see the module docstring for why not BLAS)."""
    total = p[:, 0:1] * q[:, 0][None, :]
    for index in range(1, p.shape[1]):
        total += p[:, index : index + 1] * q[:, index][None, :]
    return total


@dataclass
class PowerSgdState:
    """One tensor's warm start and residual."""

    q: Any
    residual: Any


class PowerSgdFactors:
    """Per-tensor state of PowerSGD: Q (warm start) and the residual, keyed by tensor name."""

    def __init__(self, rank: int, seed: int) -> None:
        self.rank, self.seed = rank, seed
        self.states: dict[str, PowerSgdState] = {}

    def state(self, name: str, like: Any) -> PowerSgdState:
        """``name``'s state; ``like`` (the tensor as a matrix) gives shape, dtype, device."""
        state = self.states.get(name)
        if state is None:
            xp = array_namespace(like)
            q = initial_q(like.shape[1], self.rank, self.seed, name, like.dtype)
            state = PowerSgdState(q=xp.asarray(q), residual=xp.zeros_like(like))
            self.states[name] = state
        return state

    def allreduce(
        self, matrices: Sequence[tuple[str, Any]], allreduce: Any, key: str, share: float
    ) -> None:
        """Replace each (name, matrix) of this replica's gradients, in place, by the rank-r
        approximation of the sum over replicas; ``allreduce(array, key)`` sums over them and
        ``share`` is this replica's part of the sum (1/N). All of P travels in one all-reduce,
        then all of Q in another."""
        if not matrices:
            return
        states = [self.state(name, matrix) for name, matrix in matrices]
        accumulated = [matrix + state.residual for (_, matrix), state in zip(matrices, states)]
        p_sum = allreduce(
            _flat_concatenation([m @ s.q for m, s in zip(accumulated, states)]), f"{key}/p"
        )
        ps = [
            orthogonalize(p) for p in _split(p_sum, [(m.shape[0], self.rank) for m in accumulated])
        ]
        q_sum = allreduce(
            _flat_concatenation([m.T @ p for m, p in zip(accumulated, ps)]), f"{key}/q"
        )
        qs = _split(q_sum, [(m.shape[1], self.rank) for m in accumulated])
        for (_, matrix), state, total, p, q in zip(matrices, states, accumulated, ps, qs):
            approximation = low_rank_product(p, q)
            state.q = q  # the warm start of the next step
            state.residual = total - approximation * share
            matrix[...] = approximation

    def local_approximation(self, name: str, gradient: Any) -> tuple[Any, Any]:
        """One replica alone (a parameter-server push): rank-r factors (P, Q) of its own
        (gradient + residual), P orthonormal; the residual keeps the rest."""
        shape = matrix_shape(gradient.shape)
        if shape is None:  # the callers factor matrices only (see ``matrix_shape``)
            raise TypeError(f"{name}: PowerSGD factors a matrix, not shape {gradient.shape}")
        rows, columns = shape
        matrix = gradient.reshape(rows, columns)
        state = self.state(name, matrix)
        accumulated = matrix + state.residual
        p = orthogonalize(accumulated @ state.q)
        q = accumulated.T @ p
        state.q = q
        state.residual = accumulated - low_rank_product(p, q)
        return p, q


def _flat_concatenation(arrays: Sequence[Any]) -> Any:
    return array_namespace(arrays[0]).concatenate([array.reshape(-1) for array in arrays])


def _split(flat: Any, shapes: Sequence[tuple[int, int]]) -> list[Any]:
    parts, offset = [], 0
    for rows, columns in shapes:
        parts.append(flat[offset : offset + rows * columns].reshape(rows, columns))
        offset += rows * columns
    return parts
