"""The GPU runtime the test suite runs GPU code paths with on CPUs: the strict CuPy double,
its NCCL, ``DTRAIN_FAKE_GPUS`` GPUs per machine (default 2) and plain local clusters, whose
worker processes load this same runtime (they inherit ``DTRAIN_GPU_RUNTIME``).

Loading it also guards every kernel of the interpreter: on this runtime's devices, a kernel
that receives a NumPy array (the host leaking into a device program) raises TypeError naming
the op, even where NumPy alone could have computed it.
"""

from __future__ import annotations

import functools
import os

import numpy as np

from tests.gpu_double import fake_cupy, fake_nccl
from workbench.ir.rules import IMPL_RULES
from workbench.runtime.cluster import local_cpu_cluster
from workbench.runtime.gpu_runtime import GpuRuntime

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

RUNTIME = GpuRuntime(
    name="cupy-cpu-double",
    array_module=fake_cupy,
    device_count=lambda: int(os.environ.get("DTRAIN_FAKE_GPUS", "2")),
    out_of_memory=fake_cupy.OutOfMemoryError,
    nccl=fake_nccl,
    stream_pointer=lambda: 0,
    synchronize=lambda: None,
    local_cluster=local_cpu_cluster,
)
