"""The GPU runtime of this process: CuPy on NVIDIA GPUs, or none.

Everything GPU-specific the engine needs goes through one :class:`GpuRuntime`: the array module
kernels run with, how many GPUs this process may use and which one it computes on, which errors
mean the device ran out of memory, NCCL, the stream collectives are queued on, how to tell that
queued work has finished, and how a local GPU cluster is started. It is looked up where the
work runs (each worker asks its own process), so a CPU-only client can drive GPU workers.

``DTRAIN_GPU_RUNTIME=module:attribute`` names another runtime object with the same fields. The
test suite uses it to run every GPU code path on CPUs through a strict stand-in for CuPy
(``tests/gpu_double``); worker processes inherit the variable, so they load the same one.
"""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from workbench.runtime.local_cluster import local_cpu_cluster
from workbench.runtime.visible_devices import visible_device_count, visible_devices_of_workers

RUNTIME_VARIABLE = "DTRAIN_GPU_RUNTIME"

# (error class, the ``status`` values that mean "out of memory"; None: every instance does)
OutOfMemoryErrors = tuple[tuple[type[BaseException], frozenset[int] | None], ...]


class DeviceError(RuntimeError):
    """The devices a run asks for are not there (named, with what is missing)."""


@dataclass(frozen=True)
class GpuRuntime:
    name: str
    array_module: ModuleType  # CuPy's interface: asarray, asnumpy, empty, add, ...
    device_count: Callable[[], int]  # GPUs this process may use (CUDA_VISIBLE_DEVICES applies)
    device_identity: Callable[[], str]  # the UUID of the GPU this process computes on
    out_of_memory_errors: OutOfMemoryErrors
    nccl: Any  # ``cupy.cuda.nccl``'s interface (its ``available`` says whether NCCL loaded)
    stream_pointer: Callable[[], int]  # the current stream, where collectives are queued
    synchronize: Callable[[], None]  # wait for the device's queued work
    # () -> a function saying whether the work queued on the current stream until now has
    # finished (a CUDA event recorded now): lets a wait on the device have a deadline.
    mark_queued_work: Callable[[], Callable[[], bool]]
    # (devices, protocol, scheduler options, TLS security or None, workers per GPU, scratch
    # directory) -> a local cluster of ``devices`` workers, ``workers per GPU`` of them
    # computing on each GPU, keeping their scratch files in the scratch directory
    local_cluster: Callable[[int, str, dict, Any, int, str | None], Any]
    versions: Callable[[], dict[str, str | None]]  # driver, CUDA runtime, NCCL, ... (doctor)

    def is_out_of_memory(self, error: BaseException) -> bool:
        """Whether ``error`` says the device ran out of memory: the memory pool's own error, or
        an allocation failure inside the CUDA runtime, cuBLAS, cuSOLVER, cuRAND or NCCL."""
        return any(
            isinstance(error, kind)
            and (statuses is None or getattr(error, "status", None) in statuses)
            for kind, statuses in self.out_of_memory_errors
        )

    @property
    def nccl_available(self) -> bool:
        """Whether NCCL loaded: ``cupy.cuda.nccl`` imports without it and sets ``available``."""
        return self.nccl is not None and bool(getattr(self.nccl, "available", False))


def _nvml_device_count() -> int:
    """NVML's count of physical GPUs; 0 on machines without NVIDIA drivers (never raises)."""
    try:
        from distributed.diagnostics import nvml

        return int(nvml.device_get_count())
    except Exception:
        return 0


def _cuda_device_count() -> int:
    """The GPUs this process may use: NVML's physical count narrowed by
    ``CUDA_VISIBLE_DEVICES`` (NVML ignores it), else, where NVML is missing (containers
    without libnvidia-ml), what the CUDA runtime itself counts; 0 when neither finds one."""
    physical = _nvml_device_count()
    if physical:
        return visible_device_count(os.environ.get("CUDA_VISIBLE_DEVICES"), physical)
    try:
        import cupy

        # cudaGetDeviceCount applies CUDA_VISIBLE_DEVICES and raises when none is visible.
        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:
        return 0


def _cuda_device_identity() -> str:
    """``GPU-xxxxxxxx-xxxx-...`` of the current device (two workers that print the same one
    share a GPU); its PCI bus id where the CUDA runtime gives no UUID."""
    import cupy

    device = cupy.cuda.Device()
    raw = cupy.cuda.runtime.getDeviceProperties(device.id).get("uuid", b"")
    if len(raw) == 16:
        text = raw.hex()
        return f"GPU-{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"
    # CuPy converts the 16 bytes as a C string, cut at the first zero byte.
    return f"PCI-{device.pci_bus_id}"


def _cuda_versions() -> dict[str, str | None]:
    """The driver's, the CUDA runtime's and NCCL's versions as this process loads them (None:
    not found), for ``dtrain doctor``."""
    import cupy

    def attempt(read: Callable[[], Any]) -> str | None:
        try:
            return str(read())
        except Exception:
            return None

    def cuda_version(code: int) -> str:  # 13000 -> "13.0"
        return f"{code // 1000}.{code % 1000 // 10}"

    def nccl_version() -> str:  # 22707 -> "2.27.7"
        from cupy.cuda import nccl

        code = int(nccl.get_version())
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"

    def driver() -> str:
        import pynvml

        pynvml.nvmlInit()
        return pynvml.nvmlSystemGetDriverVersion()

    return {
        "driver": attempt(driver),
        "cuda driver api": attempt(lambda: cuda_version(cupy.cuda.runtime.driverGetVersion())),
        "cuda runtime": attempt(lambda: cuda_version(cupy.cuda.runtime.runtimeGetVersion())),
        "nccl": attempt(nccl_version),
    }


def _local_cuda_cluster(
    devices: int,
    protocol: str,
    scheduler_options: dict,
    security=None,
    workers_per_gpu: int = 1,
    local_directory: str | None = None,
):
    if workers_per_gpu > 1:
        # dask-cuda names each worker after its GPU and refuses a second worker on one ("Can
        # not scale beyond visible devices"), so workers sharing GPUs are started as a plain
        # local cluster whose worker i sees its own GPU first, as dask-cuda would set it.
        environments = [
            {"CUDA_VISIBLE_DEVICES": visible}
            for visible in visible_devices_of_workers(devices, workers_per_gpu)
        ]
        return local_cpu_cluster(
            devices, protocol, scheduler_options, security, environments, local_directory
        )
    try:
        from dask_cuda import LocalCUDACluster
    except ImportError as error:
        raise DeviceError(
            "--device-type gpu needs dask-cuda (pip install 'dtrain-workbench[gpu-cu13]', or "
            f"gpu-cu12 for a CUDA 12 driver): {error}"
        ) from None
    from workbench.runtime.worker_environment import worker_environment, worker_preloads

    with worker_environment():
        return LocalCUDACluster(
            n_workers=devices,
            threads_per_worker=1,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            memory_limit=0,  # no host-memory spilling, as on CPU clusters
            device_memory_limit=0,  # no device-to-host spilling: a run's arrays stay resident
            protocol="tls" if security is not None else protocol,
            security=security,
            scheduler_kwargs=scheduler_options,  # e.g. the dashboard pages' preload
            local_directory=local_directory,
            preload=worker_preloads(),  # workers yield the cores to the notebook and browser
        )


def _cupy_runtime() -> GpuRuntime | None:
    try:
        import cupy
    except Exception:
        return None
    from cupy.cuda import nccl  # imports without NCCL too, with ``available`` False

    return GpuRuntime(
        name="cupy",
        array_module=cupy,
        device_count=_cuda_device_count,
        device_identity=_cuda_device_identity,
        out_of_memory_errors=_cuda_out_of_memory_errors(cupy),
        nccl=nccl,
        stream_pointer=lambda: cupy.cuda.get_current_stream().ptr,
        synchronize=lambda: cupy.cuda.get_current_stream().synchronize(),
        mark_queued_work=_cuda_event_marker,
        local_cluster=_local_cuda_cluster,
        versions=_cuda_versions,
    )


def _cuda_out_of_memory_errors(cupy: ModuleType) -> OutOfMemoryErrors:
    """The memory pool's error, and the status codes of an allocation failure in each CUDA
    library CuPy's kernels call (each a RuntimeError with ``status``; a library that does not
    load here is left out: nothing can raise its error)."""
    found: list[tuple[type[BaseException], frozenset[int] | None]] = [
        (cupy.cuda.memory.OutOfMemoryError, None)
    ]
    for module, name, statuses in (
        ("cupy_backends.cuda.api.runtime", "CUDARuntimeError", {2}),  # cudaErrorMemoryAllocation
        ("cupy_backends.cuda.api.driver", "CUDADriverError", {2}),  # CUDA_ERROR_OUT_OF_MEMORY
        ("cupy_backends.cuda.libs.cublas", "CUBLASError", {3}),  # CUBLAS_STATUS_ALLOC_FAILED
        ("cupy_backends.cuda.libs.cusolver", "CUSOLVERError", {2}),  # ..._ALLOC_FAILED
        ("cupy_backends.cuda.libs.curand", "CURANDError", {102}),  # ..._ALLOCATION_FAILED
    ):
        try:
            found.append((getattr(importlib.import_module(module), name), frozenset(statuses)))
        except (ImportError, AttributeError):
            continue
    return tuple(found)


def _cuda_event_marker() -> Callable[[], bool]:
    import cupy

    event = cupy.cuda.Event(block=False, disable_timing=True)
    event.record(cupy.cuda.get_current_stream())
    return lambda: bool(event.done)


@functools.cache
def _load(named: str) -> GpuRuntime | None:
    if not named:
        return _cupy_runtime()
    module, _, attribute = named.partition(":")
    return getattr(importlib.import_module(module), attribute or "RUNTIME")


def loaded_runtime() -> GpuRuntime | None:
    """This process's GPU runtime whether or not it finds a GPU (None: CuPy is missing)."""
    return _load(os.environ.get(RUNTIME_VARIABLE, ""))


def gpu_runtime() -> GpuRuntime | None:
    """This process's GPU runtime when it has a usable GPU, else None (never raises for a
    missing GPU or CuPy; a ``DTRAIN_GPU_RUNTIME`` that cannot be imported does raise)."""
    runtime = loaded_runtime()
    if runtime is None or runtime.device_count() == 0:
        return None
    return runtime


def missing_gpu_reason() -> str:
    """Why :func:`gpu_runtime` found nothing here, in words for an error message."""
    runtime = loaded_runtime()
    if runtime is None:
        return (
            "no NVIDIA GPU was found"
            if _nvml_device_count() == 0
            else "CuPy is not installed (pip install 'dtrain-workbench[gpu-cu13]', or gpu-cu12 "
            "for a CUDA 12 driver)"
        )
    if os.environ.get("CUDA_VISIBLE_DEVICES") is not None and _nvml_device_count():
        return f"CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']!r} hides every GPU"
    return "no NVIDIA GPU was found"
