"""Gradient accumulation (``--accumulate K``): a step's rows in K consecutive slices, one
micro-step each, their gradients summed into a buffer per gradient, then one exchange and one
update on the mean.

Each micro-step's loss is the mean over its slice, and the slices are equal, so the mean over
all the rows is the sum of the K micro-step gradients divided by K: what one pass over the rows
gives, in another summation order (docs/guide/command-line.md, "Gradient accumulation"). A
device keeps one buffer per gradient from the first micro-step until the last; the gradients of
the last micro-step are added as backward produces them, so a device that starts exchanging a
gradient as soon as it appears (a data-parallel replica's buckets) does so during the last
micro-step only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from workbench.ir.memory import MemoryLedger

# The ledger's key of a gradient's accumulation buffer (held under "gradients").
BUFFER_KEY = "accumulation/{}"


def micro_slices(rows: int, micro_steps: int) -> Iterator[slice]:
    """The K consecutive, equal slices of a device's ``rows`` rows, in order.

    Examples
    --------
    >>> list(micro_slices(8, 2))
    [slice(0, 4, None), slice(4, 8, None)]
    """
    if micro_steps < 1 or rows % micro_steps:
        raise ValueError(f"{rows} rows do not split into {micro_steps} equal micro-steps")
    size = rows // micro_steps
    return (slice(k * size, (k + 1) * size) for k in range(micro_steps))


class GradientSum:
    """The buffers of one step's accumulation, by gradient key: :meth:`add` for the gradients
    of every micro-step but the last, :meth:`finish` for the last one's (the mean of all K,
    in the buffer, which the caller then owns). With a ``ledger`` each buffer is held under
    "gradients" (key :data:`BUFFER_KEY`) from its first micro-step until it is finished.

    Examples
    --------
    >>> import numpy as np
    >>> total = GradientSum(2, np)
    >>> total.add("w", np.array([1.0, 2.0]))
    >>> total.finish("w", np.array([3.0, 4.0]))
    array([2., 3.])
    """

    def __init__(self, micro_steps: int, xp: Any, ledger: MemoryLedger | None = None) -> None:
        self.micro_steps, self.xp, self.ledger = micro_steps, xp, ledger
        self.buffers: dict[str, Any] = {}

    def add(self, key: str, value: Any) -> None:
        """Add a gradient of an earlier micro-step (the first one's is copied: the buffer)."""
        buffer = self.buffers.get(key)
        if buffer is not None:
            buffer += value
            return
        buffer = self.buffers[key] = self.xp.array(value, copy=True)
        if self.ledger is not None:
            self.ledger.hold("gradients", BUFFER_KEY.format(key), buffer.nbytes)

    def finish(self, key: str, value: Any) -> Any:
        """The mean over the K micro-steps of gradient ``key``, ``value`` being the last's."""
        total = self.buffers.pop(key)
        total += value
        total *= total.dtype.type(1.0 / self.micro_steps)
        if self.ledger is not None:
            self.ledger.release(BUFFER_KEY.format(key))
        return total

    def finish_on_fetch(self, on_fetch: Callable[[str, Any], None] | None, prefix: str = ""):
        """An ``on_fetch`` for the last micro-step's run: each fetched key under ``prefix``
        is finished as it appears and handed on to ``on_fetch`` as the mean; returns the
        callback and the dict the means land in (by key without the prefix)."""
        means: dict[str, Any] = {}

        def fetched(key: str, value: Any) -> None:
            name = key.removeprefix(prefix)
            if name in self.buffers:
                means[name] = self.finish(name, value)
                value = means[name]
            if on_fetch is not None:
                on_fetch(key, value)

        return fetched, means


def mean_loss(losses: list[float]) -> float:
    """The loss over a step's rows from its micro-steps' (each the mean over equal slices)."""
    return float(np.mean(losses)) if len(losses) > 1 else losses[0]
