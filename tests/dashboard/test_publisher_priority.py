"""The dashboard publisher yields the CPU to the devices: its thread runs at a lower priority
than the thread that started it."""

from __future__ import annotations

import os
import sys
import time

import pytest

from workbench.dashboard.publisher import PUBLISHER_NICE, EventPublisher
from workbench.events import EventLog


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread priority is Linux's")
def test_the_publisher_thread_is_niced_and_the_caller_is_not():
    before = os.getpriority(os.PRIO_PROCESS, 0)
    warnings: list[str] = []
    publisher = EventPublisher(None, EventLog(), "run-1", {}, warnings.append)
    try:
        thread = publisher._thread.native_id
        deadline = time.monotonic() + 5
        while os.getpriority(os.PRIO_PROCESS, thread) == before and time.monotonic() < deadline:
            time.sleep(0.01)
        assert os.getpriority(os.PRIO_PROCESS, thread) == min(before + PUBLISHER_NICE, 19)
        assert os.getpriority(os.PRIO_PROCESS, 0) == before
    finally:
        publisher.close()
    # With no client, the run's last message cannot go: said once, training unaffected.
    assert len(warnings) == 1 and "sending events to the scheduler failed" in warnings[0]
