"""The step task every resident device program shares: run K steps of the program this worker
holds for the run, and turn a device out-of-memory error into one that names the device, the
step and the bytes requested.

A device program (replica, parameter-server worker, pipeline stage, model-parallel partition)
has ``run(first, count, ...)``, ``device`` (its name), ``arrays`` (its
:class:`~workbench.runtime.device_arrays.DeviceArrays`) and ``current_step``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np

from workbench.optim import Optimizer
from workbench.parallel.worker_spec import WorkerSpec, host_snapshot, initial_state
from workbench.runtime.device_arrays import out_of_memory_cause
from workbench.runtime.device_memory import DeviceMemory
from workbench.runtime.worker_service import device_service


class DeviceOutOfMemory(MemoryError):
    """A device ran out of memory; the message names the device, the step and the bytes."""


class ResidentProgram:
    """What a device program (a model-parallel partition, a pipeline stage) holds from its
    worker's spec: its device and arrays there, its simulated straggling, the variables
    ``names`` and their optimizer slots resident on the device (``state``), and the step it is
    at. A subclass calls ``__init__`` once it knows its ``names``, before it uses the rest."""

    def __init__(self, worker: WorkerSpec, optimizer: Optimizer, names: Sequence[str]) -> None:
        self.names = tuple(names)
        self.device = worker.device
        self.straggler = worker.straggler()
        self.arrays = worker.device_arrays()
        self.xp = self.arrays.xp
        self.current_step = worker.total_steps
        self.state = initial_state(worker, optimizer, self.arrays, self.names)
        # What the device measures of its memory (workbench.runtime.device_memory).
        self.memory = DeviceMemory(self.device, self.xp)

    def snapshot(self) -> dict[str, dict[str, np.ndarray]]:
        """Host copies of the variables and slots: what the client gathers at the end."""
        return host_snapshot(self.arrays, self.state, self.names)


def keep_resident(worker: WorkerSpec, program: Any) -> str:
    """Task body: hold ``program`` on this worker for ``worker``'s run, where
    :func:`run_resident_steps` finds it; the name of the device it runs."""
    device_service().runs[worker.run_id] = program
    return worker.device


def run_resident_steps(run_id: str, first: int, count: int, *arguments: Any) -> dict[str, Any]:
    """Task: steps ``first`` .. ``first + count - 1`` of this worker's program for ``run_id``."""
    program = device_service().runs[run_id]
    try:
        return program.run(first, count, *arguments)
    except Exception as error:
        cause = out_of_memory_cause(program.arrays, error)
        if cause is None:
            raise
        # Drop the program: its buffers go with it, and the run is over anyway.
        device_service().runs.pop(run_id, None)
        raise DeviceOutOfMemory(
            f"{program.device} ran out of GPU memory at step {program.current_step}: "
            f"{requested_bytes(cause)} ({cause})"
        ) from None


def requested_bytes(error: BaseException) -> str:
    """``"1,024 bytes requested"`` from CuPy's message (``Out of memory allocating 1,024
    bytes ...``).

    Examples
    --------
    >>> requested_bytes(MemoryError("Out of memory allocating 2,048 bytes (allocated so far: 0"))
    '2,048 bytes requested'
    """
    found = re.search(r"allocating ([\d,]+) bytes", str(error))
    return f"{found.group(1)} bytes requested" if found else "allocation failed"
