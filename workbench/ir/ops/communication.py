"""Send and Recv: the ops the partition pass puts on both ends of an edge cut between devices.

A pair shares a rendezvous key. ``send`` hands its input to the device's rendezvous (the
runtime's peer transport) addressed to the receiving device; ``recv`` waits for the tensor
under its key. Both are effectful (never pruned on one side only) and stateful (they reach the
rendezvous through the device's store, under :data:`RENDEZVOUS`).
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
    return state[COLLECTIVES].all_reduce(key, value)


define_op(
    "all_reduce",
    impl=_all_reduce_impl,
    shape=lambda types, *, key, group: types[0],
    vjp=NOT_DIFFERENTIABLE,
    fold=NEVER_FOLD,
    effectful=True,
    stateful=True,
    doc="Sum the input over the devices of ``group`` (one node per device, same ``key``).",
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
