"""Where the work runs decides the device type: each worker reports whether it has a usable
GPU, and the run's device type follows from every report.

``--device-type auto`` picks GPUs only when every device of the run has one; ``gpu`` with a
worker that has none is refused, naming the workers; more devices than GPUs is refused, naming
both numbers. A CPU-only client (a login node, a laptop) can so drive remote GPU workers.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping, Sequence

from workbench.runtime.gpu_runtime import DeviceError, gpu_runtime, missing_gpu_reason


def describe_device() -> dict:
    """Task (run on each worker): ``{"gpu": bool, "runtime": name, "reason": why not, "host"}``."""
    runtime = gpu_runtime()
    return {
        "gpu": runtime is not None,
        "runtime": runtime.name if runtime is not None else None,
        "reason": None if runtime is not None else missing_gpu_reason(),
        "host": socket.gethostname(),
    }


def decide_device_type(
    requested: str, reports: Mapping[str, Mapping], devices: int, names: Sequence[str] = ()
) -> str:
    """``cpu`` or ``gpu`` for a run whose workers (address -> :func:`describe_device` report,
    in rank order) answered ``reports``; ``names`` label them in errors (default: address).

    Examples
    --------
    >>> gpu, cpu = {"gpu": True}, {"gpu": False, "reason": "no NVIDIA GPU was found"}
    >>> decide_device_type("auto", {"tcp://a": gpu, "tcp://b": cpu}, 2)
    'cpu'
    >>> decide_device_type("gpu", {"tcp://a": gpu, "tcp://b": gpu}, 2)
    'gpu'
    """
    if requested == "cpu":
        return "cpu"
    labels = dict(zip(reports, names)) if names else {}
    without = [address for address, report in reports.items() if not report.get("gpu")]
    if requested == "auto":
        return "cpu" if without or len(reports) < devices else "gpu"
    with_gpu = len(reports) - len(without)
    if with_gpu < devices and not without:
        raise DeviceError(
            f"--devices: {devices} GPU devices requested but the cluster has {with_gpu} GPUs"
        )
    if without:
        listed = ", ".join(
            f"{labels.get(address, address)} ({reports[address].get('reason') or 'no GPU'})"
            for address in without
        )
        kinds = "a mix of GPU and CPU workers" if with_gpu else "no GPU worker"
        raise DeviceError(
            f"--device-type: gpu was requested but the run's devices are {kinds}; "
            f"without a GPU: {listed}"
        )
    return "gpu"
