"""Send and Recv: the ops the partition pass puts on both ends of an edge cut between devices.

A pair shares a rendezvous key. ``send`` hands its input to the device's rendezvous (the
runtime's peer transport) addressed to the receiving device; ``recv`` waits for the tensor
under its key. Both are effectful (never pruned on one side only) and stateful (they reach the
rendezvous through the device's store, under :data:`RENDEZVOUS`).

``all_reduce`` and ``tensor_input`` are Megatron's conjugate pair g and f (docs/guide/
distributed-training.md, "Tensor parallelism"). A tensor-parallel rank runs its own copy of
the step (SPMD): every rank computes the same replicated loss and differentiates it alone.
``all_reduce`` (g) sums partial results forward; its cotangent passes unchanged to each
summand, since the loss depends on the sum alone. ``tensor_input`` (f) marks a replicated
value entering a split region: identity forward; backward, the gradients the ranks' shards
give it are partial sums, so its cotangent is all-reduced over the same group. Together they
give, rank by rank, exactly the one-device gradient of each shard, and of every replicated
value the same gradient on every rank.
"""

from __future__ import annotations

import threading

import numpy as np

from workbench.ir.graph import TensorType
from workbench.ir.rules import NEVER_FOLD, NOT_DIFFERENTIABLE, define_op

RENDEZVOUS = "__rendezvous__"
COLLECTIVES = "__collectives__"


def _send_impl(xp, value, *, state, key, source, target):
    state[RENDEZVOUS].send(target, key, value)


def _recv_impl(xp, *, state, key, source, target, shape, dtype):
    return state[RENDEZVOUS].recv(source, key)


define_op(
    "send",
    impl=_send_impl,
    shape=lambda types, *, key, source, target: (),
    vjp=NOT_DIFFERENTIABLE,
    fold=NEVER_FOLD,
    effectful=True,
    stateful=True,
    doc="Send the input to device ``target`` under rendezvous ``key``.",
)
define_op(
    "recv",
    impl=_recv_impl,
    shape=lambda types, *, key, source, target, shape, dtype: TensorType(tuple(shape), dtype),
    vjp=NOT_DIFFERENTIABLE,
    fold=NEVER_FOLD,
    effectful=True,
    stateful=True,
    doc="Receive the tensor sent from device ``source`` under rendezvous ``key``.",
)


def all_reduce(x, *, key: str, group: tuple[str, ...]):
    """The sum of ``x`` over the ``group`` devices: each device of the group has its own
    ``all_reduce`` node under the same ``key`` (a collective instance, as TF's
    ``CollectiveReduce`` ops), and the nodes meet through the devices' collectives."""
    return x.builder.emit("all_reduce", [x], key=key, group=tuple(group))


def _all_reduce_impl(xp, value, *, state, key, group):
    if len(group) == 1:  # a group of one device: its value is the sum
        return value
    return state[COLLECTIVES].all_reduce(key, value)


def _all_reduce_vjp(inputs, outputs, cts, *, key, group):
    # The loss reads only the sum, so each summand's cotangent is the sum's (Megatron's g).
    return [cts[0]]


define_op(
    "all_reduce",
    impl=_all_reduce_impl,
    shape=lambda types, *, key, group: types[0],
    vjp=_all_reduce_vjp,
    fold=NEVER_FOLD,
    effectful=True,
    stateful=True,
    doc="Sum the input over the devices of ``group`` (one node per device, same ``key``); "
    "backward, the cotangent passes to the input unchanged.",
)


def tensor_input(x, *, key: str, group: tuple[str, ...]):
    """``x`` unchanged, marking a replicated value read by a split computation: its gradient
    is all-reduced over ``group`` under ``key + "/grad"`` (Megatron's f)."""
    return x.builder.emit("tensor_input", [x], key=key, group=tuple(group))


def _tensor_input_vjp(inputs, outputs, cts, *, key, group):
    return [all_reduce(cts[0], key=f"{key}/grad", group=group)]


define_op(
    "tensor_input",
    impl=lambda xp, value, *, key, group: value,
    shape=lambda types, *, key, group: types[0],
    vjp=_tensor_input_vjp,
    doc="Identity; backward, the cotangent is summed over the devices of ``group`` under "
    "``key + '/grad'``.",
)


class LocalRendezvous:
    """A thread-safe in-process rendezvous: partitions run as threads of one process (tests,
    ``dtrain plan --check``). ``recv`` blocks until the matching ``send``."""

    def __init__(self, timeout: float = 30.0) -> None:
        self.table: dict[str, np.ndarray] = {}
        self.bytes = 0
        self.timeout = timeout
        self._arrived = threading.Condition()

    def send(self, target, key, value) -> None:
        with self._arrived:
            self.table[key] = value
            self.bytes += int(value.nbytes)
            self._arrived.notify_all()

    def recv(self, source, key):
        with self._arrived:
            if not self._arrived.wait_for(lambda: key in self.table, self.timeout):
                raise TimeoutError(f"nothing arrived from {source} under {key!r}")
            return self.table.pop(key)


class LocalCollectives:
    """A thread-safe in-process collectives hub for ``size`` ranks running as threads of one
    process (tests): ``member(rank)`` is the ``COLLECTIVES`` object of one rank. An
    ``all_reduce`` waits for every rank's value under its key and hands each the same sum,
    added in rank order; ``bytes`` counts what the ranks contributed."""

    def __init__(self, size: int, timeout: float = 30.0) -> None:
        self.size, self.timeout = size, timeout
        self.bytes = 0
        self.keys: list[str] = []  # in the order the sums completed
        self._parts: dict[str, dict[int, np.ndarray]] = {}
        self._sums: dict[str, np.ndarray] = {}
        self._taken: dict[str, int] = {}
        self._arrived = threading.Condition()

    def member(self, rank: int) -> _LocalMember:
        return _LocalMember(self, rank)

    def all_reduce(self, rank: int, key: str, value):
        with self._arrived:
            parts = self._parts.setdefault(key, {})
            parts[rank] = value
            self.bytes += int(value.nbytes)
            if len(parts) == self.size:
                total = parts[0].copy()
                for other in range(1, self.size):
                    total = total + parts[other]
                self._sums[key] = total
                self.keys.append(key)
                self._arrived.notify_all()
            elif not self._arrived.wait_for(lambda: key in self._sums, self.timeout):
                raise TimeoutError(f"rank {rank}: the other ranks never reduced {key!r}")
            total = self._sums[key]
            self._taken[key] = self._taken.get(key, 0) + 1
            if self._taken[key] == self.size:
                del self._parts[key], self._sums[key], self._taken[key]
            return total


class _LocalMember:
    def __init__(self, hub: LocalCollectives, rank: int) -> None:
        self.hub, self.rank = hub, rank

    def all_reduce(self, key: str, value):
        return self.hub.all_reduce(self.rank, key, value)
