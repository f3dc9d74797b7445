"""What a device measures of its memory while it trains (docs/guide/command-line.md,
"Measured memory").

A :class:`DeviceMemory` keeps the device's :class:`~workbench.ir.memory.MemoryLedger`. Each
step is a window: its resident state (parameters, optimizer slots) is held afresh when the
step begins (a restore may have replaced the arrays) and what the ledger then holds is the
report's resident split (a ZeRO stage 1 or 2 rank counts the whole parameters it keeps, of
which its shard is a slice), the step's programs run with the ledger
and the device holds its exchange buffers in it; when the step ends the window's high-water is
folded into the report, beside the process's resident-set high-water and, on GPUs, the CuPy
memory pool's bytes. What the device keeps outside the interpreter (the gradients it reduces,
packed buckets, tensors sent or received) it holds with :meth:`DeviceMemory.hold` until the
step ends. Counting costs a few dictionary operations per value the interpreter computes:
devices on a cluster, whose steps also exchange, count every step; one device in the client's
process counts one step in :data:`REPORT_EVERY` (every step runs the same program on the same
shapes), where counting would cost as much as a small model's step; so do a parameter
shard, with its updates and the reads it serves, which every worker waits for, and a pipeline
stage, whose compute is on the pipeline's path (it counts the first step of each task too).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from workbench.events.memory_summary import memory_scalars
from workbench.ir.memory import CATEGORIES, MemoryLedger, MemoryPeak
from workbench.optim import compute_copy_name, is_compute_copy

# Steps between reports where a device reports per step rather than per task (one device in
# the client's process, which also counts only those steps; free-running parameter-server
# workers): each report carries the peak of the steps counted since the one before.
REPORT_EVERY = 20


def is_counted(step: int, first: int = 0) -> bool:
    """Whether a device that counts a sample of its steps counts ``step`` of a task that
    began at ``first``: the first, then one in :data:`REPORT_EVERY`. Every step of such a
    device runs the same programs on the same shapes, so the sample sees the peak.

    >>> [step for step in range(5, 45) if is_counted(step, first=5)]
    [5, 20, 40]
    """
    return step == first or step % REPORT_EVERY == 0


def process_rss_peak() -> int | None:
    """The most memory this process has held resident since it started, in bytes: the
    kernel's high-water (``getrusage``), which counts what a sample between steps would miss;
    psutil's current resident set where ``getrusage`` is missing."""
    try:
        import resource
    except ImportError:  # Windows
        try:
            import psutil

            return int(psutil.Process().memory_info().rss)
        except Exception:
            return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)  # Linux counts KiB


def gpu_pool_bytes(xp: Any) -> int | None:
    """The bytes CuPy's default memory pool holds from the device (``total_bytes``: in use
    plus cached; the pool keeps what it once took), or None off GPUs."""
    pool = getattr(xp, "get_default_memory_pool", None)
    if pool is None:
        return None
    return int(pool().total_bytes())


class DeviceMemory:
    """One device's ledger and its pending report.

    Examples
    --------
    >>> import numpy as np
    >>> memory = DeviceMemory("cpu:0", np)
    >>> state = {"w": np.zeros(100), "w/momentum": np.zeros(100)}
    >>> with memory.step(state) as ledger:
    ...     ledger.hold_array("activations", np.ones(50))
    >>> [(name, value) for name, _, value, _ in memory.report(0)][:4]
    [('memory/peak_bytes', 2000), ('memory/at_peak/parameters', 800), \
('memory/at_peak/optimizer', 800), ('memory/at_peak/gradients', 0)]
    """

    def __init__(self, device: str, xp: Any) -> None:
        self.device, self.xp = device, xp
        self.ledger = MemoryLedger()
        self._resident: list[Any] = []
        self._for_step: list[Any] = []
        self._pending: MemoryPeak | None = None
        self._pending_resident: dict[str, int] | None = None
        self._gpu_pool_peak: int | None = None

    @contextmanager
    def step(self, state: Mapping[str, Any]) -> Iterator[MemoryLedger]:
        """A step's window: ``state`` held as resident, the ledger to run the step with."""
        self.begin(state)
        try:
            yield self.ledger
        finally:
            self.end()

    def begin(self, state: Mapping[str, Any]) -> None:
        ledger = self.ledger
        # A store whose entries view buffers it keeps whole says what it keeps (a ZeRO stage
        # 1 or 2 rank's shards are slices of each bucket's parameters:
        # workbench/parallel/data_parallel/sharded_state.py).
        kept = getattr(state, "kept", None)
        if callable(kept):
            state = kept()
        # What a step that failed before its end still held goes first.
        for array in [*self._resident, *self._for_step]:
            ledger.release_array(array)
        self._for_step = []
        # Only arrays count: a state may also hold a rendezvous or a collectives handle.
        self._resident = [value for value in state.values() if hasattr(value, "nbytes")]
        for name, value in state.items():
            if hasattr(value, "nbytes"):
                ledger.hold_array(self.category(name, state), value)
        resident = ledger.current()
        pending = self._pending_resident
        if pending is None or sum(resident.values()) > sum(pending.values()):
            self._pending_resident = resident
        ledger.start_window()

    def hold(self, category: str, array: Any) -> None:
        """Count ``array`` (by its buffer) until the step ends: what the device keeps outside
        the interpreter's values, such as the gradients it reduces or a packed bucket."""
        self.ledger.hold_array(category, array)
        self._for_step.append(array)

    def let_go(self, array: Any) -> None:
        """Stop counting (and keeping) ``array``, held with :meth:`hold`, before the step
        ends: a buffer the device frees mid-step (a sharded replica's packed bucket, once
        reduce-scattered)."""
        for index, held in enumerate(self._for_step):
            if held is array:
                del self._for_step[index]
                self.ledger.release_array(array)
                return

    @staticmethod
    def category(name: str, state: Mapping[str, Any]) -> str:
        """Where a resident array counts. Optimizer slots are named after their variable
        (``<var>/momentum``, a shard's ``shard/<b>/adam_m``): "optimizer", as are, under mixed
        precision, the float32 master weights beside their 16-bit copies (``<var>/half``,
        "parameters"). Everything else is a variable the programs compute with: "parameters".

        Examples
        --------
        >>> state = dict.fromkeys(["w", "w/momentum", "shard/0", "shard/0/adam_v"])
        >>> [DeviceMemory.category(name, state) for name in state]
        ['parameters', 'optimizer', 'parameters', 'optimizer']
        >>> DeviceMemory.category("w", {"w": 0, "w/half": 0})
        'optimizer'
        """
        if is_compute_copy(name):
            return "parameters"
        owner, _, _ = name.rpartition("/")
        if owner in state or compute_copy_name(name) in state:
            return "optimizer"
        return "parameters"

    def end(self) -> None:
        peak = self.ledger.peak()
        for array in self._for_step:
            self.ledger.release_array(array)
        self._for_step = []
        pending = self._pending
        if pending is None:
            self._pending = peak
        else:
            largest = peak if peak.total > pending.total else pending
            self._pending = MemoryPeak(
                largest.total,
                largest.at_peak,
                {c: max(peak.by_category[c], pending.by_category[c]) for c in CATEGORIES},
            )
        pool = gpu_pool_bytes(self.xp)
        if pool is not None:
            self._gpu_pool_peak = max(pool, self._gpu_pool_peak or 0)

    def report(self, step: int) -> list[tuple[str, int, float, str]]:
        """The scalars of what was measured since the last report (none if nothing was),
        labelled with ``step``; the next report starts afresh."""
        pending, self._pending = self._pending, None
        if pending is None:
            return []
        pool, self._gpu_pool_peak = self._gpu_pool_peak, None
        resident, self._pending_resident = self._pending_resident, None
        return memory_scalars(
            self.device,
            step,
            pending.total,
            pending.at_peak,
            pending.by_category,
            process_rss_peak(),
            pool,
            resident,
        )
