"""Which device type a run uses, the array module (NumPy or CuPy) that goes with it, and the
copies between host and device.

GPU packages are optional: they are reached through :mod:`workbench.runtime.gpu_runtime`,
only when a GPU run is asked for or detected.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

from workbench.runtime.gpu_runtime import DeviceError, gpu_runtime, missing_gpu_reason

__all__ = ["DeviceError"]


def gpu_count() -> int:
    """The GPUs this process can use (0 without a GPU or without CuPy; never raises)."""
    runtime = gpu_runtime()
    return runtime.device_count() if runtime is not None else 0


def resolve_device_type(requested: str) -> str:
    """``cpu`` or ``gpu`` for ``--device-type auto|cpu|gpu`` on this machine; a GPU request
    without a usable GPU and CuPy is an error that says which part is missing."""
    if requested == "cpu":
        return "cpu"
    usable = gpu_runtime() is not None
    if requested == "gpu" and not usable:
        raise DeviceError(
            f"--device-type: gpu was requested but {missing_gpu_reason()}; install the 'gpu' "
            "extra (pip install 'dtrain-workbench[gpu]') on a machine with a GPU, or use cpu"
        )
    return "gpu" if usable else "cpu"


def array_module(device_type: str) -> ModuleType:
    """NumPy for ``cpu``; the GPU runtime's array module (CuPy) for ``gpu``."""
    if device_type != "gpu":
        return np
    runtime = gpu_runtime()
    if runtime is None:
        raise DeviceError(f"--device-type: gpu, but on this machine {missing_gpu_reason()}")
    return runtime.array_module


def array_namespace(array: Any) -> ModuleType:
    """The array module an array belongs to (NumPy, CuPy, or another with CuPy's interface).

    Examples
    --------
    >>> array_namespace(np.zeros(2)).__name__
    'numpy'
    """
    if isinstance(array, (np.ndarray, np.generic)):
        return np
    runtime = gpu_runtime()
    if runtime is not None and isinstance(array, runtime.array_module.ndarray):
        return runtime.array_module
    namespace = getattr(array, "__array_namespace__", None)
    if namespace is None:
        raise TypeError(f"not an array of a known array module: {type(array).__name__}")
    return namespace()


def to_host(array):
    """A NumPy copy of a NumPy or device array (a copy even on the CPU: variables are updated
    in place, and a snapshot must not change with them)."""
    if isinstance(array, (np.ndarray, np.generic)):
        return np.array(array, copy=True)
    return array_namespace(array).asnumpy(array)


def device_name(device_type: str, task: int = 0, index: int = 0, job: str = "worker") -> str:
    """TF-style device names: ``/job:worker/task:0/device:CPU:0``."""
    kind = "GPU" if device_type == "gpu" else "CPU"
    return f"/job:{job}/task:{task}/device:{kind}:{index}"


def names_device(pattern: str, device_name: str) -> bool:
    """Whether ``pattern`` (as a user writes it: ``task:1``, ``job:ps/task:0``, a whole name or
    a tag like ``task1-cpu0``) names ``device_name``; a pattern without a job means a worker.

    Examples
    --------
    >>> names_device("task:1", "/job:worker/task:1/device:CPU:0")
    True
    >>> names_device("job:ps/task:0", "/job:worker/task:0/device:CPU:0")
    False
    """
    if pattern == device_tag(device_name):
        return True
    wanted = dict(part.split(":", 1) for part in pattern.strip("/").split("/") if ":" in part)
    if not wanted or "task" not in wanted:
        return False
    have = dict(part.split(":", 1) for part in device_name.strip("/").split("/") if ":" in part)
    wanted.setdefault("job", "worker")
    return all(have.get(key, "").lower() == value.lower() for key, value in wanted.items())


def short_device_name(device_name: str) -> str:
    """``/job:worker/task:1/device:CPU:0`` -> ``task:1``; ``/job:ps/task:0/...`` ->
    ``job:ps/task:0``: how ``--simulate-straggler`` names a device."""
    have = dict(part.split(":", 1) for part in device_name.strip("/").split("/") if ":" in part)
    task = f"task:{have.get('task', '0')}"
    return task if have.get("job", "worker") == "worker" else f"job:{have['job']}/{task}"


def device_tag(device_name: str) -> str:
    """``/job:worker/task:1/device:CPU:0`` -> ``task1-cpu0``: the short name in Dask task keys
    and on the charts' device axes.

    Examples
    --------
    >>> device_tag("/job:ps/task:0/device:GPU:1")
    'ps-task0-gpu1'
    """
    parts = dict(part.split(":", 1) for part in device_name.strip("/").split("/") if ":" in part)
    kind, _, index = parts.get("device", "CPU:0").partition(":")
    job = parts.get("job", "worker")
    prefix = "" if job == "worker" else f"{job}-"
    return f"{prefix}task{parts.get('task', '0')}-{kind.lower()}{index}"
