"""What the benchmark ran on: processor, cores, library versions, BLAS, GPU.

A timing without its machine cannot be compared with anything, so every report starts here.
Versions come from package metadata, NumPy's BLAS from ``threadpoolctl`` (which sees the
libraries loaded in this process) and PyTorch's from its build configuration.
"""

from __future__ import annotations

import os
import platform
import re
import sys
from importlib import metadata
from typing import Any

from threadpoolctl import threadpool_info


def cpu_model() -> str:
    """The processor's marketing name from /proc/cpuinfo, else what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def usable_cores() -> int:
    """Cores this process may run on (a container or ``taskset`` may allow fewer than exist)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def thread_pools() -> list[dict[str, Any]]:
    """BLAS and OpenMP libraries loaded in this process, with their current thread limits."""
    return [
        {
            "api": pool.get("user_api"),
            "library": pool.get("internal_api"),
            "version": pool.get("version"),
            "architecture": pool.get("architecture"),
            "threads": pool.get("num_threads"),
            "file": os.path.basename(pool.get("filepath", "")),
            "owner": _owner(pool.get("filepath", "")),
        }
        for pool in threadpool_info()
    ]


def _owner(path: str) -> str:
    """The package that shipped a library: ``.../site-packages/numpy.libs/x.so`` -> numpy."""
    match = re.search(r"site-packages[/\\]([^/\\]+)", path)
    return match.group(1).removesuffix(".libs") if match else os.path.dirname(path)


def torch_blas() -> str | None:
    """The BLAS torch was built with and the CPU kernels it picks (torch links its BLAS
    statically, so threadpoolctl cannot see it); None without torch."""
    if package_version("torch") is None:
        return None
    import torch

    config = torch.__config__.show()
    blas = re.search(r"BLAS_INFO=(\w+)", config)
    capability = re.search(r"CPU capability usage: (\w+)", config)
    return " ".join(
        part for part in (blas and blas.group(1), capability and f"({capability.group(1)})") if part
    )


def gpu_model() -> str | None:
    """The first CUDA device's name, if CuPy is already imported (a GPU run) and sees one."""
    cupy = sys.modules.get("cupy")
    if cupy is None:
        return None
    try:
        name = cupy.cuda.runtime.getDeviceProperties(0)["name"]
    except Exception:
        return None
    return name.decode() if isinstance(name, bytes) else str(name)


def describe_machine() -> dict[str, Any]:
    """A JSON-ready description of this machine and the numeric libraries in use.

    Examples
    --------
    >>> sorted(describe_machine())[:3]
    ['cores', 'cpu', 'cupy']
    """
    return {
        "cpu": cpu_model(),
        "cores": os.cpu_count() or 1,
        "usable_cores": usable_cores(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "numpy": package_version("numpy"),
        "torch": package_version("torch"),
        "cupy": package_version("cupy-cuda12x") or package_version("cupy"),
        "gpu": gpu_model(),
        "thread_pools": thread_pools(),
        "torch_blas": torch_blas(),
    }
