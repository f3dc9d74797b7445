"""A device's compute below the service threads of its host, on a CPU cluster.

A parameter shard answers its workers on a thread of its own (``MessageLoop``), and every
worker's step waits on it twice: for the push to be taken and for the next read. On a host
whose cores all compute (two workers and a shard on two cores), a woken shard thread queues
behind the computing threads for a share of a core, and every worker then waits for that
queueing on top of the shard's work. Linux gives a thread that wakes the core first when it
weighs more than the thread computing there, so a device's compute runs at a niceness
:data:`COMPUTE_NICENESS_GAP` above the thread that started it (Dask's task thread, at the
worker's own niceness, which every service thread of the worker shares): the shard's thread
then preempts a computing worker at once, and what it takes lengthens that worker's compute,
not the wait of both (docs/guide/distributed-training.md, on parameter servers).

Niceness is a thread's own on Linux, and an unprivileged thread may raise it but never lower
it again, so the compute runs on a thread made for it that ends with it: the worker's task
thread, which later runs of the same cluster use, keeps its niceness. Elsewhere (another
system, or a GPU device, whose host thread mostly waits for its kernels) the work runs where
it is called.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

Result = TypeVar("Result")

COMPUTE_NICENESS_GAP = 5
MOST_NICENESS = 19  # Linux's lowest priority


def below_services(work: Callable[[], Result], name: str, on_cpu: bool = True) -> Result:
    """``work()`` on a thread of its own (its name starting with ``name``) at
    :data:`COMPUTE_NICENESS_GAP` more niceness than the calling thread, on Linux when
    ``on_cpu``; its result, or its exception raised here. The calling thread's niceness is
    unchanged.

    Examples
    --------
    >>> below_services(lambda: 6 * 7, "answer")
    42
    """
    if not on_cpu or sys.platform != "linux":
        return work()
    with ThreadPoolExecutor(1, thread_name_prefix=name, initializer=_lower_own_priority) as pool:
        return pool.submit(work).result()


def _lower_own_priority() -> None:
    """The calling thread's niceness raised by :data:`COMPUTE_NICENESS_GAP` (at most 19)."""
    thread = threading.get_native_id()
    niceness = os.getpriority(os.PRIO_PROCESS, thread)
    os.setpriority(os.PRIO_PROCESS, thread, min(MOST_NICENESS, niceness + COMPUTE_NICENESS_GAP))
