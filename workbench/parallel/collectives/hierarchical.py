"""Hierarchical all-reduce: reduce inside each group to its leader, ring all-reduce among the
leaders, broadcast back inside each group.

With groups = hosts this is MultiWorkerMirrored's shape (fast links inside a host, one ring
across hosts); with groups inside one host it is TF's ``HierarchicalCopyAllReduce``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from workbench.parallel.collectives.reduce_to_one import broadcast, reduce
from workbench.parallel.collectives.ring import ring_allreduce
from workbench.runtime.transport import Transport, recv_into


class SubgroupTransport:
    """A view of ``members`` (global ranks) of a transport as ranks 0..len(members)-1."""

    def __init__(self, parent: Transport, members: Sequence[int]) -> None:
        self.parent, self.members = parent, list(members)
        self.rank, self.size = self.members.index(parent.rank), len(self.members)

    @property
    def bytes_sent(self) -> int:
        return self.parent.bytes_sent

    @property
    def bytes_received(self) -> int:
        return self.parent.bytes_received

    def count_traffic(self, sent: int, received: int) -> None:
        self.parent.count_traffic(sent, received)

    def send(self, peer: int, key: str, array: Any) -> None:
        self.parent.send(self.members[peer], key, array)

    def recv(self, peer: int, key: str) -> Any:
        return self.parent.recv(self.members[peer], key)

    def recv_into(self, peer: int, key: str, out: Any, add_to: Any = None) -> None:
        recv_into(self.parent, self.members[peer], key, out, add_to)


def even_groups(size: int, groups: int) -> list[list[int]]:
    """Consecutive ranks split into ``groups`` groups (the last ones one smaller if uneven)."""
    groups = max(1, min(groups, size))
    base, extra = divmod(size, groups)
    result, start = [], 0
    for index in range(groups):
        count = base + (1 if index < extra else 0)
        result.append(list(range(start, start + count)))
        start += count
    return result


def hierarchical_allreduce(
    transport: Transport, array: Any, key: str, groups: Sequence[Sequence[int]]
) -> Any:
    """Sum over all ranks using ``groups`` (a partition of the ranks; leader = first member)."""
    if transport.size == 1:
        return array.copy()
    mine = next(group for group in groups if transport.rank in group)
    local = SubgroupTransport(transport, mine)
    # 1. Inside the group: everything to the leader.
    partial = reduce(local, array, f"{key}/local", root=0) if len(mine) > 1 else array
    # 2. Across groups: the leaders run a ring.
    if local.rank == 0:
        leaders = SubgroupTransport(transport, [group[0] for group in groups])
        partial = ring_allreduce(leaders, partial, f"{key}/leaders")
    # 3. Inside the group: the leader's total to everyone.
    return broadcast(local, partial, f"{key}/spread", root=0) if len(mine) > 1 else partial
