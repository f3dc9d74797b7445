"""The device a worker's code computes on: its array module and the copies to and from it.

A device program (a replica, a parameter shard, a pipeline stage, a model-parallel partition)
asks for its :class:`DeviceArrays` once, in the process that runs it, and from then on keeps
every variable, optimizer slot and data shard as arrays of ``xp``. The host sees a tensor only
through :meth:`DeviceArrays.to_host` (checkpoints, chart snapshots, the final gather) or when
it is staged through host memory on its way to a peer.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from workbench.runtime.devices import to_host
from workbench.runtime.gpu_runtime import DeviceError, GpuRuntime, gpu_runtime, missing_gpu_reason


@dataclass(frozen=True)
class DeviceArrays:
    kind: str  # "cpu" or "gpu"
    xp: ModuleType
    runtime: GpuRuntime | None = None

    @classmethod
    def for_kind(cls, kind: str, device: str = "this worker") -> DeviceArrays:
        """The arrays of a ``kind`` device in this process; a GPU device in a process without
        a usable GPU is an error naming ``device``."""
        if kind != "gpu":
            return cls("cpu", np)
        runtime = gpu_runtime()
        if runtime is None:
            raise DeviceError(f"{device} should be a GPU, but there {missing_gpu_reason()}")
        return cls("gpu", runtime.array_module, runtime)

    @property
    def on_gpu(self) -> bool:
        return self.runtime is not None

    def to_device(self, array: Any) -> Any:
        """An own, writable, contiguous copy on this device (update ops write in place)."""
        return self.xp.array(array, copy=True, order="C")

    def readable(self, array: Any) -> Any:
        """``array`` for reading only: the host array itself on a CPU (a data set a host
        shares stays one copy), a copy on a GPU."""
        return self.xp.asarray(array)

    def adopt(self, array: Any) -> Any:
        """``array`` if it is already on this kind of device (what arrived over Dask's comms
        usually is), else a copy on this device."""
        already_here = isinstance(array, self.xp.ndarray)
        return array if already_here else self.to_device(array)

    def to_host(self, array: Any) -> np.ndarray:
        return to_host(array)

    def for_the_wire(self, array: Any, wire: str) -> Any:
        """``array`` as it may go to Dask's comms over ``wire`` (``tcp``, ``tls``, ``ucx``): a
        host array as it is; a device array staged through host memory, since distributed
        serializes device arrays only with numba or rmm installed (its CuPy serializers
        import one of them, and without both the send fails); over UCX as it is, device to
        device, on workers checked for those serializers before the run started."""
        if isinstance(array, np.ndarray) or wire in ("ucx", "ucxx"):
            return array
        return self.to_host(array)

    def scalar(self, value: Any) -> Any:
        """A 0-d device array (a learning rate fed to a step)."""
        return self.xp.asarray(value)

    def is_out_of_memory(self, error: BaseException) -> bool:
        return self.runtime is not None and self.runtime.is_out_of_memory(error)

    def synchronize(self) -> None:
        """Wait for this device's queued kernels (so a phase's end time is its real end)."""
        if self.runtime is not None:
            self.runtime.synchronize()


def out_of_memory_cause(arrays: DeviceArrays, error: BaseException) -> BaseException | None:
    """The device out-of-memory error behind ``error`` (kernels' errors are wrapped by the
    interpreter), or None."""
    seen: BaseException | None = error
    while seen is not None:
        if arrays.is_out_of_memory(seen):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None
