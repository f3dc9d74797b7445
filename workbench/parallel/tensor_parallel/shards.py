"""A tensor-parallel rank's share of the variables and optimizer slots, and the whole ones
joined back from the ranks' snapshots: runs start from and checkpoint the one-device layout,
so a checkpoint resumes under any strategy (docs/guide/distributed-training.md, "Tensor
parallelism").

A slot (``<parameter>/momentum``, ``<parameter>/adam_m``) is split as its parameter is when it
has the parameter's shape; a scalar slot (Adam's step count) is the same on every rank.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from workbench.passes.tensor_split import (
    REPLICATED,
    ParameterSplit,
    SplitPlan,
    join_rank_shards,
    shard_of,
)


def slot_split(
    slot: str, value: Any, parameters: Mapping[str, Any], plan: SplitPlan
) -> ParameterSplit:
    """How optimizer slot ``slot`` splits: as the parameter it belongs to, if it has its shape.

    Examples
    --------
    >>> plan = {"dense_0/kernel": ParameterSplit("column", 1)}
    >>> kernel = np.zeros((4, 2))
    >>> slot_split("dense_0/kernel/momentum", kernel, {"dense_0/kernel": kernel}, plan).role
    'column'
    >>> slot_split("dense_0/kernel/adam_t", np.zeros(()), {"dense_0/kernel": kernel}, plan).role
    'replicated'
    """
    owners = [name for name in parameters if slot.startswith(name + "/")]
    if not owners:
        return REPLICATED
    owner = max(owners, key=len)
    if np.ndim(value) != np.ndim(parameters[owner]):
        return REPLICATED
    return plan.get(owner, REPLICATED)


def rank_state(
    parameters: Mapping[str, np.ndarray],
    slots: Mapping[str, np.ndarray] | None,
    plan: SplitPlan,
    rank: int,
    tp: int,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray] | None]:
    """Rank ``rank``'s variables and slots (None: fresh) from the whole ones."""
    # A copy of each slice (contiguous, and 0-d scalars stay 0-d).
    own = {
        name: np.array(shard_of(value, plan.get(name, REPLICATED), rank, tp))
        for name, value in parameters.items()
    }
    if slots is None:
        return own, None
    own_slots = {
        name: np.array(shard_of(value, slot_split(name, value, parameters, plan), rank, tp))
        for name, value in slots.items()
    }
    return own, own_slots


def join_state(snapshots: Sequence[Mapping[str, Any]], plan: SplitPlan) -> tuple[dict, dict]:
    """(variables, slots), whole, from the ranks' snapshots in rank order."""
    first = snapshots[0]
    parameters = {
        name: join_rank_shards(
            [s["parameters"][name] for s in snapshots], plan.get(name, REPLICATED)
        )
        for name in first["parameters"]
    }
    slots = {
        name: join_rank_shards(
            [s["optimizer_state"][name] for s in snapshots],
            slot_split(name, value, first["parameters"], plan),
        )
        for name, value in first["optimizer_state"].items()
    }
    return parameters, slots
