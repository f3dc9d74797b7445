"""The GPU runtime the test suite runs GPU code paths with on CPUs: the strict CuPy double,
its NCCL, ``DTRAIN_FAKE_GPUS`` GPUs per machine (default 2) and local clusters whose worker
processes load this same runtime (they inherit ``DTRAIN_GPU_RUNTIME``). Like dask-cuda's
``LocalCUDACluster``, which gives worker i a ``CUDA_VISIBLE_DEVICES`` list that starts with
its own GPU, the double's local cluster gives each worker a ``DTRAIN_FAKE_VISIBLE_DEVICES``
that starts with its own (``workers per GPU`` workers share one).

Loading it also guards every kernel of the interpreter: on this runtime's devices, a kernel
that receives a NumPy array (the host leaking into a device program) raises TypeError naming
the op, even where NumPy alone could have computed it.
"""

from __future__ import annotations

import functools

import numpy as np

from tests.gpu_double import fake_cupy, fake_nccl
from workbench.ir.rules import IMPL_RULES
from workbench.runtime.gpu_runtime import GpuRuntime
from workbench.runtime.local_cluster import local_cpu_cluster
from workbench.runtime.visible_devices import visible_devices_of_workers

SELECTOR = "tests.gpu_double.runtime:RUNTIME"


class HostArrayInDeviceKernel(TypeError):
    pass


def _guarded(op: str, impl):
    @functools.wraps(impl)
    def kernel(xp, *arguments, **attributes):
        if xp is fake_cupy:
            for argument in arguments:
                if isinstance(argument, np.ndarray):
                    raise HostArrayInDeviceKernel(
                        f"kernel {op!r} received a NumPy array {argument.shape} on a GPU device"
                    )
        return impl(xp, *arguments, **attributes)

    kernel.guarded = True
    return kernel


def guard_kernels() -> None:
    for op, impl in list(IMPL_RULES.items()):
        if not getattr(impl, "guarded", False):
            IMPL_RULES[op] = _guarded(op, impl)


guard_kernels()


def local_cluster(
    devices, protocol, scheduler_options, security=None, workers_per_gpu=1, local_directory=None
):
    lists = visible_devices_of_workers(devices, workers_per_gpu)
    environments = [{"DTRAIN_FAKE_VISIBLE_DEVICES": visible} for visible in lists]
    return local_cpu_cluster(
        devices, protocol, scheduler_options, security, environments, local_directory
    )


def versions() -> dict:
    return {"driver": "double", "cuda runtime": "double", "nccl": "2.27.7"}


RUNTIME = GpuRuntime(
    name="cupy-cpu-double",
    array_module=fake_cupy,
    device_count=lambda: len(fake_cupy.visible_gpus()),
    device_identity=fake_cupy.device_identity,
    out_of_memory_errors=(
        (fake_cupy.OutOfMemoryError, None),
        (fake_cupy.CUDARuntimeError, frozenset({2})),
        (fake_cupy.CUBLASError, frozenset({3})),
    ),
    nccl=fake_nccl,
    stream_pointer=lambda: 0,
    synchronize=fake_cupy.queue.drain,
    mark_queued_work=fake_cupy.queue.marker,
    local_cluster=local_cluster,
    versions=versions,
)
