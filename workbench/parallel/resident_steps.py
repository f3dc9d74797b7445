"""The step task every resident device program shares: run K steps of the program this worker
holds for the run, and turn a device out-of-memory error into one that names the device, the
step and the bytes requested.

A device program (replica, parameter-server worker, pipeline stage, model-parallel partition)
has ``run(first, count, ...)``, ``device`` (its name), ``arrays`` (its
:class:`~workbench.runtime.device_arrays.DeviceArrays`) and ``current_step``.
"""

from __future__ import annotations

import re
from typing import Any

from workbench.runtime.device_arrays import out_of_memory_cause
from workbench.runtime.worker_service import device_service


class DeviceOutOfMemory(MemoryError):
    """A device ran out of memory; the message names the device, the step and the bytes."""


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
