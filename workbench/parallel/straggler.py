"""A simulated straggler (``--simulate-straggler DEVICE=FACTOR``): the named device's compute
takes FACTOR times as long, so a user can watch what each strategy does with a slow device.

The device computes as usual, then sleeps (FACTOR - 1) times what it took: the sleep sits
inside the device's compute phase on the timeline, and it leaves the CPU to the other devices
(a real slow device would not take their cores either).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from workbench.runtime.devices import names_device


class SimulatedStraggler:
    def __init__(self, factor: float = 1.0) -> None:
        self.factor = factor

    @classmethod
    def for_device(cls, config: dict, device: str) -> SimulatedStraggler:
        """The slowdown ``config`` (a run config as a dict) asks of ``device`` (1: none)."""
        for pattern, factor in config.get("simulate_straggler", ()):
            if names_device(pattern, device):
                return cls(float(factor))
        return cls()

    @contextmanager
    def computing(self) -> Iterator[None]:
        """Wrap one piece of compute: it ends ``factor`` times as late."""
        start = time.perf_counter()
        yield
        if self.factor > 1:
            time.sleep((self.factor - 1) * (time.perf_counter() - start))
