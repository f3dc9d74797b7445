"""The GPU runtime of this process: CuPy on NVIDIA GPUs, or none.

Everything GPU-specific the engine needs goes through one :class:`GpuRuntime`: the array module
kernels run with, how many GPUs this machine has, the out-of-memory error, NCCL, the stream
collectives are queued on and how a local GPU cluster is started. It is looked up where the
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

RUNTIME_VARIABLE = "DTRAIN_GPU_RUNTIME"


class DeviceError(RuntimeError):
    """The devices a run asks for are not there (named, with what is missing)."""


@dataclass(frozen=True)
class GpuRuntime:
    name: str
    array_module: ModuleType  # CuPy's interface: asarray, asnumpy, empty, add, ...
    device_count: Callable[[], int]
    out_of_memory: type[BaseException]
    nccl: Any  # ``cupy.cuda.nccl``'s interface, or None where NCCL is missing
    stream_pointer: Callable[[], int]  # the current stream, where collectives are queued
    synchronize: Callable[[], None]  # wait for the device's queued work
    # (devices, protocol, scheduler options) -> a started local cluster, one GPU per worker
    # (devices, protocol, scheduler options, TLS security or None) -> a local cluster
    local_cluster: Callable[[int, str, dict, Any], Any]


def _nvml_device_count() -> int:
    """NVML's count of GPUs; 0 on machines without NVIDIA drivers (never raises)."""
    try:
        from distributed.diagnostics import nvml

        return int(nvml.device_get_count())
    except Exception:
        return 0


def _local_cuda_cluster(devices: int, protocol: str, scheduler_options: dict, security=None):
    try:
        from dask_cuda import LocalCUDACluster
    except ImportError as error:
        raise DeviceError(
            f"--device-type gpu needs dask-cuda (pip install 'dtrain-workbench[gpu]'): {error}"
        ) from None
    return LocalCUDACluster(
        n_workers=devices,
        threads_per_worker=1,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
        protocol="tls" if security is not None else protocol,
        security=security,
        scheduler_kwargs=scheduler_options,  # e.g. the dashboard pages' preload
    )


def _cupy_runtime() -> GpuRuntime | None:
    try:
        import cupy
    except Exception:
        return None
    try:
        from cupy.cuda import nccl
    except Exception:
        nccl = None
    return GpuRuntime(
        name="cupy",
        array_module=cupy,
        device_count=_nvml_device_count,
        out_of_memory=cupy.cuda.memory.OutOfMemoryError,
        nccl=nccl,
        stream_pointer=lambda: cupy.cuda.get_current_stream().ptr,
        synchronize=lambda: cupy.cuda.get_current_stream().synchronize(),
        local_cluster=_local_cuda_cluster,
    )


@functools.cache
def _load(named: str) -> GpuRuntime | None:
    if not named:
        return _cupy_runtime()
    module, _, attribute = named.partition(":")
    return getattr(importlib.import_module(module), attribute or "RUNTIME")


def gpu_runtime() -> GpuRuntime | None:
    """This process's GPU runtime when it has a usable GPU, else None (never raises for a
    missing GPU or CuPy; a ``DTRAIN_GPU_RUNTIME`` that cannot be imported does raise)."""
    runtime = _load(os.environ.get(RUNTIME_VARIABLE, ""))
    if runtime is None or runtime.device_count() == 0:
        return None
    return runtime


def missing_gpu_reason() -> str:
    """Why :func:`gpu_runtime` found nothing here, in words for an error message."""
    runtime = _load(os.environ.get(RUNTIME_VARIABLE, ""))
    if runtime is None:
        return (
            "no NVIDIA GPU was found"
            if _nvml_device_count() == 0
            else "CuPy is not installed (pip install 'dtrain-workbench[gpu]')"
        )
    return "no NVIDIA GPU was found"
