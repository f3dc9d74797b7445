"""What a device holds, by kind of tensor, and the most it held at once.

A :class:`MemoryLedger` counts the bytes of the buffers a device keeps: its parameters and
optimizer state (resident between steps), and, while a step runs, the gradients, the
activations the interpreter keeps for backward and the buffers the exchanges use. Arrays are
counted by the buffer they view (a reshape or a slice of a held buffer adds nothing), so the
count is the memory the tensors occupy, not the sum of their views. The interpreter frees
each value after its last reader (:mod:`workbench.ir.interpreter`), so the ledger's high-water
is the device's peak of live tensor bytes, which the planner predicts from the same rules
(docs/architecture/prediction.md).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

# Where a device's bytes go; every report names all five, zeros included.
CATEGORIES: tuple[str, ...] = (
    "parameters",  # the variables a device computes with (a shard's, or gathered ones live)
    "optimizer",  # optimizer slots, and float32 master weights under mixed precision
    "gradients",  # parameter gradients, from backward until the update consumed them
    "activations",  # every other value a step's graph keeps live: inputs, forward, backward
    "communication",  # packed buckets and buffers an exchange sends from or receives into
)


@dataclass(frozen=True)
class MemoryPeak:
    """A window's high-water: ``total`` is the most held at one moment, ``at_peak`` how that
    moment's bytes split by category, ``by_category`` each category's own high-water (which
    may fall at different moments, so it can sum to more than ``total``)."""

    total: int
    at_peak: dict[str, int]
    by_category: dict[str, int]

    def as_json(self) -> dict[str, Any]:
        return {"total": self.total, "at_peak": self.at_peak, "by_category": self.by_category}


def buffer_of(array: Any) -> Any:
    """The array owning ``array``'s memory (NumPy and CuPy views keep it in ``.base``)."""
    while getattr(array, "base", None) is not None and hasattr(array.base, "nbytes"):
        array = array.base
    return array


class MemoryLedger:
    """One device's live tensor bytes by category, and their high-water since the last
    :meth:`start_window`.

    Examples
    --------
    >>> import numpy as np
    >>> ledger = MemoryLedger()
    >>> weights = np.zeros(1000)
    >>> ledger.hold_array("parameters", weights)
    >>> ledger.hold_array("activations", weights.reshape(10, 100))  # a view: nothing more
    >>> ledger.hold("communication", "bucket", 4000)
    >>> ledger.release("bucket")
    >>> peak = ledger.peak()
    >>> peak.total, peak.by_category["communication"], ledger.current_total
    (12000, 4000, 8000)
    """

    def __init__(self) -> None:
        self._held: dict[Hashable, tuple[str, int, int]] = {}  # key -> (category, bytes, refs)
        self._current = dict.fromkeys(CATEGORIES, 0)
        self.current_total = 0
        self.start_window()

    def start_window(self) -> None:
        """Forget the high-water: the next :meth:`peak` covers what is held from now on."""
        self._peak_total = self.current_total
        self._at_peak = dict(self._current)
        self._peak_by_category = dict(self._current)

    def hold(self, category: str, key: Hashable, nbytes: int) -> None:
        """Count ``nbytes`` under ``key`` (counted once however often it is held; each hold
        needs a release)."""
        if category not in self._current:
            raise ValueError(f"unknown memory category {category!r}; one of {CATEGORIES}")
        held = self._held.get(key)
        if held is not None:
            self._held[key] = (held[0], held[1], held[2] + 1)
            return
        self._held[key] = (category, nbytes, 1)
        self._current[category] += nbytes
        self.current_total += nbytes
        if self._current[category] > self._peak_by_category[category]:
            self._peak_by_category[category] = self._current[category]
        if self.current_total > self._peak_total:
            self._peak_total = self.current_total
            self._at_peak = dict(self._current)

    def release(self, key: Hashable) -> None:
        """Drop one hold of ``key``; its bytes go when its last hold does."""
        category, nbytes, refs = self._held[key]
        if refs > 1:
            self._held[key] = (category, nbytes, refs - 1)
            return
        del self._held[key]
        self._current[category] -= nbytes
        self.current_total -= nbytes

    def hold_array(self, category: str, array: Any) -> None:
        """Count the buffer ``array`` views (nothing for a non-array, such as a Python
        scalar)."""
        self.hold_value(category, array)

    def hold_value(self, category: str, array: Any) -> Hashable | None:
        """:meth:`hold_array`, returning the key it held ``array``'s buffer under (None for a
        non-array): :meth:`release` of it is :meth:`release_array` without finding the buffer
        again (how the interpreter counts every value it computes)."""
        buffer = array if getattr(array, "base", None) is None else buffer_of(array)
        nbytes = getattr(buffer, "nbytes", None)
        if nbytes is None:
            return None
        key = id(buffer)
        self.hold(category, key, int(nbytes))
        return key

    def release_array(self, array: Any) -> None:
        buffer = buffer_of(array)
        if getattr(buffer, "nbytes", None) is not None:
            self.release(id(buffer))

    def holds(self, key: Hashable) -> bool:
        return key in self._held

    def current(self) -> dict[str, int]:
        return dict(self._current)

    def peak(self) -> MemoryPeak:
        return MemoryPeak(self._peak_total, dict(self._at_peak), dict(self._peak_by_category))
