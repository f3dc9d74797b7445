"""Values with one entry per replica, and how the client combines them: ``tf.distribute``'s
``PerReplica``, ``ReduceOp`` and ``strategy.reduce``.

A :class:`PerReplica` is what ``strategy.run`` returns and what a distributed data set yields:
replica r's value is ``values[r]``. Given to ``strategy.run`` (anywhere in its arguments: at
the top, in tuples, lists or dicts), replica r receives ``values[r]``; any other value reaches
every replica unchanged.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from workbench.config import ConfigError


@dataclass(frozen=True)
class PerReplica:
    """One value per replica, in replica order (``values[r]`` is replica r's).

    Examples
    --------
    >>> losses = PerReplica((0.5, 0.25))
    >>> losses.values
    (0.5, 0.25)
    >>> len(losses)
    2
    """

    values: tuple[Any, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "values", tuple(self.values))

    def __len__(self) -> int:
        return len(self.values)

    def __repr__(self) -> str:
        inner = ",\n".join(f"  {r}: {_describe(value)}" for r, value in enumerate(self.values))
        return f"PerReplica({{\n{inner}\n}})"


def _describe(value: Any) -> str:
    if isinstance(value, tuple):
        return "(" + ", ".join(_describe(part) for part in value) + ")"
    if isinstance(value, np.ndarray) and value.size > 6:
        return f"array(shape={value.shape}, dtype={value.dtype})"
    return repr(value)


class ReduceOp(str, enum.Enum):
    """How ``strategy.reduce`` combines the replicas' values (``"SUM"`` and ``"MEAN"`` as
    strings work too)."""

    SUM = "SUM"
    MEAN = "MEAN"


def reduce_op(op: Any) -> ReduceOp:
    """``op`` as a :class:`ReduceOp`; anything else is a :class:`ConfigError` naming
    ``reduce_op`` and the allowed values.

    Examples
    --------
    >>> reduce_op("mean")
    <ReduceOp.MEAN: 'MEAN'>
    >>> reduce_op("MAX")
    Traceback (most recent call last):
    ...
    workbench.config.ConfigError: reduce_op: unknown reduce op 'MAX'; choose one of: SUM, MEAN
    """
    if isinstance(op, ReduceOp):
        return op
    if isinstance(op, str) and op.upper() in ReduceOp.__members__:
        return ReduceOp[op.upper()]
    allowed = ", ".join(ReduceOp.__members__)
    raise ConfigError("reduce_op", f"unknown reduce op {op!r}; choose one of: {allowed}")


def reduce_values(op: Any, value: Any, axis: int | None, replicas: int) -> Any:
    """The replicas' values summed or averaged (``axis=None``), or reduced along ``axis`` of
    the values joined end to end (``axis=0``: over the whole global batch). A value that is
    not a :class:`PerReplica` is taken to be the same on every replica, as in TensorFlow.

    Examples
    --------
    >>> float(reduce_values("SUM", PerReplica((1.0, 2.0)), None, replicas=2))
    3.0
    >>> reduce_values("MEAN", PerReplica((np.array([1.0, 3.0]), np.array([5.0]))), 0, 2)
    np.float64(3.0)
    """
    op = reduce_op(op)
    if axis is not None and (isinstance(axis, bool) or not isinstance(axis, int)):
        raise ConfigError("axis", f"must be None or an int, got {axis!r}")
    if not isinstance(value, PerReplica):
        if axis is not None:
            value = PerReplica((value,) * replicas)
        else:
            one = np.asarray(value)
            return one * replicas if op is ReduceOp.SUM else one
    arrays = [np.asarray(part) for part in value.values]
    if axis is None:
        total = arrays[0].copy()
        for part in arrays[1:]:  # in replica order: the same sum every time
            total = total + part
        return total if op is ReduceOp.SUM else total / len(arrays)
    if any(part.ndim == 0 for part in arrays):
        raise ConfigError("axis", f"axis={axis} needs arrays; the replicas returned scalars")
    joined = np.concatenate(arrays, axis=axis)
    return joined.sum(axis=axis) if op is ReduceOp.SUM else joined.mean(axis=axis)


def local_results(value: Any) -> tuple[Any, ...]:
    """The values of the replicas this process holds (all of them: the client sees every
    replica's value)."""
    return value.values if isinstance(value, PerReplica) else (value,)


def check_replica_counts(structure: Any, replicas: int, field: str) -> None:
    """Refuse a :class:`PerReplica` in ``structure`` whose length is not ``replicas``."""
    for found in _per_replica_values(structure):
        if len(found) != replicas:
            raise ConfigError(
                field,
                f"a PerReplica value holds {len(found)} values, but the strategy has "
                f"{replicas} replicas (num_replicas_in_sync); give one value per replica",
            )


def contains_per_replica(structure: Any) -> bool:
    return any(True for _ in _per_replica_values(structure))


def select_replica(structure: Any, replica: int) -> Any:
    """``structure`` as replica ``replica`` receives it: each :class:`PerReplica` replaced by
    its value for that replica."""
    if isinstance(structure, PerReplica):
        return structure.values[replica]
    if isinstance(structure, dict):
        return {key: select_replica(item, replica) for key, item in structure.items()}
    if isinstance(structure, list):
        return [select_replica(item, replica) for item in structure]
    if isinstance(structure, tuple):
        items = [select_replica(item, replica) for item in structure]
        return type(structure)(*items) if hasattr(structure, "_fields") else tuple(items)
    return structure


def _per_replica_values(structure: Any):
    if isinstance(structure, PerReplica):
        yield structure
    elif isinstance(structure, dict):
        for item in structure.values():
            yield from _per_replica_values(item)
    elif isinstance(structure, list | tuple):
        for item in structure:
            yield from _per_replica_values(item)


def per_replica_arguments(
    args: Sequence[Any], kwargs: dict[str, Any], replicas: int
) -> list[tuple[tuple, dict]]:
    """Each replica's ``(args, kwargs)``, after checking every :class:`PerReplica` in them
    holds one value per replica (a :class:`ConfigError` naming ``args`` or ``kwargs``)."""
    if not isinstance(args, tuple | list):
        raise ConfigError("args", f"must be a tuple of arguments, got {type(args).__name__}")
    if not isinstance(kwargs, dict):
        raise ConfigError("kwargs", f"must be a dict of arguments, got {type(kwargs).__name__}")
    check_replica_counts(tuple(args), replicas, "args")
    check_replica_counts(kwargs, replicas, "kwargs")
    return [
        (tuple(select_replica(tuple(args), r)), select_replica(kwargs, r)) for r in range(replicas)
    ]
