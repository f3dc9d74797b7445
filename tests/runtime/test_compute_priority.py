"""A parameter-server worker computes below its host's service threads on a CPU cluster
(docs/guide/distributed-training.md, on parameter servers), on a thread that ends with the
work, so the task thread that later runs use keeps its niceness."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from workbench.runtime.compute_priority import (
    COMPUTE_NICENESS_GAP,
    MOST_NICENESS,
    below_services,
)

linux_only = pytest.mark.skipif(sys.platform != "linux", reason="niceness per thread: Linux")


def _niceness() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def _where() -> tuple[int, str]:
    return _niceness(), threading.current_thread().name


@linux_only
def test_the_work_runs_on_its_own_thread_below_the_caller_and_the_caller_keeps_its_niceness():
    before = _niceness()
    niceness, name = below_services(_where, "device-0")
    assert name.startswith("device-0") and name != threading.current_thread().name
    assert niceness == min(MOST_NICENESS, before + COMPUTE_NICENESS_GAP)
    assert niceness > before or before == MOST_NICENESS
    assert _niceness() == before  # what later work on the calling thread gets


@linux_only
def test_the_works_exception_is_raised_to_the_caller():
    class StepFailed(RuntimeError):
        pass

    def failing() -> None:
        raise StepFailed("step 3 stalled")

    with pytest.raises(StepFailed, match="step 3 stalled"):
        below_services(failing, "device-1")


def test_a_gpu_devices_work_runs_where_it_is_called():
    niceness, name = below_services(_where, "device-0", on_cpu=False)
    assert name == threading.current_thread().name
    assert niceness == _niceness()
