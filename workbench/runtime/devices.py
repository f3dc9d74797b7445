"""Which device type a run uses and the array module (NumPy or CuPy) that goes with it.

GPU packages are optional: they are imported only when a GPU run is asked for or detected.
"""

from __future__ import annotations

from types import ModuleType


class DeviceError(RuntimeError):
    pass


def gpu_count() -> int:
    """NVML's count of GPUs; 0 on machines without NVIDIA drivers (never raises)."""
    try:
        from distributed.diagnostics import nvml

        return int(nvml.device_get_count())
    except Exception:
        return 0


def _cupy() -> ModuleType | None:
    try:
        import cupy

        return cupy
    except Exception:
        return None


def resolve_device_type(requested: str) -> str:
    """``cpu`` or ``gpu`` for ``--device-type auto|cpu|gpu``; a GPU request without a usable
    GPU and CuPy is an error that says which part is missing."""
    if requested == "cpu":
        return "cpu"
    usable = gpu_count() > 0 and _cupy() is not None
    if requested == "gpu" and not usable:
        missing = "no NVIDIA GPU was found" if gpu_count() == 0 else "CuPy is not installed"
        raise DeviceError(
            f"--device-type: gpu was requested but {missing}; install the 'gpu' extra "
            "(pip install 'dtrain-workbench[gpu]') on a machine with a GPU, or use cpu"
        )
    return "gpu" if usable else "cpu"


def array_module(device_type: str) -> ModuleType:
    if device_type == "gpu":
        import cupy

        return cupy
    import numpy

    return numpy


def to_host(array):
    """A NumPy copy of a NumPy or CuPy array (a copy even on the CPU: variables are updated in
    place, and a snapshot must not change with them)."""
    get = getattr(array, "get", None)
    if get is not None and type(array).__module__.startswith("cupy"):
        return get()
    import numpy

    return numpy.array(array, copy=True)


def device_name(device_type: str, task: int = 0, index: int = 0, job: str = "worker") -> str:
    """TF-style device names: ``/job:worker/task:0/device:CPU:0``."""
    kind = "GPU" if device_type == "gpu" else "CPU"
    return f"/job:{job}/task:{task}/device:{kind}:{index}"


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
