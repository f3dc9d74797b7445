"""Where the work runs decides the device type: each worker reports whether it has a usable
GPU, which GPU it computes on, and what it can do with it (NCCL, CUDA serializers); the run's
device type and collectives follow from every report.

``--device-type auto`` picks GPUs only when every device of the run has one; ``gpu`` with a
worker that has none is refused, naming the workers; more devices than GPUs is refused, naming
both numbers. Two workers on one GPU (a plain ``dask worker --nworkers 2`` on a GPU host, or
two ``dask cuda worker`` processes given the same ``CUDA_VISIBLE_DEVICES``) are refused by
name unless the run says ``--share-gpu``: NCCL refuses two ranks on one GPU ("Duplicate GPU
detected"), and the two would halve each other's memory without saying so. A CPU-only client
(a login node, a laptop) can so drive remote GPU workers.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping, Sequence
from typing import Any

import ml_dtypes
import numpy as np

from workbench.runtime.gpu_runtime import DeviceError, gpu_runtime, missing_gpu_reason


def device_serializers_work(array_module: Any) -> bool:
    """Whether distributed can serialize this runtime's device arrays device to device (its
    CUDA serializers, which import numba or rmm when first used; ``--protocol ucx``)."""
    try:
        from distributed.protocol.cuda import cuda_serialize

        cuda_serialize.dispatch(array_module.ndarray)
    except Exception:
        return False
    return True


def bfloat16_obstacle(array_module: Any) -> str | None:
    """Why ``array_module`` cannot compute in bfloat16 (None: it can). CuPy has bfloat16 from
    version 14 on, through ml_dtypes (and NumPy >= 2.1.2); CuPy 13 refuses the dtype. Asked of
    the module itself, so any CuPy answers for what it really does."""
    try:
        values = array_module.asarray(np.ones((2, 2), dtype=ml_dtypes.bfloat16))
        array_module.all(array_module.isfinite(values @ values))
    except Exception as error:  # each CuPy fails its own way: any failure is the answer
        version = getattr(array_module, "__version__", None)
        named = " ".join([array_module.__name__, *([version] if version else [])])
        return f"{named} cannot compute in bfloat16 ({error})"
    return None


def describe_device() -> dict[str, Any]:
    """Task (run on each worker): ``{"gpu": bool, "runtime": name, "reason": why not,
    "host", "gpu_identity": the GPU's UUID, "nccl": NCCL loaded, "cuda_serializers": bool,
    "bfloat16": why its CuPy cannot compute in bfloat16, or None}``."""
    runtime = gpu_runtime()
    report: dict[str, Any] = {
        "gpu": runtime is not None,
        "runtime": runtime.name if runtime is not None else None,
        "reason": None if runtime is not None else missing_gpu_reason(),
        "host": socket.gethostname(),
        "gpu_identity": None,
        "nccl": False,
        "cuda_serializers": False,
        "bfloat16": None,
    }
    if runtime is not None:
        report["gpu_identity"] = runtime.device_identity()
        report["nccl"] = runtime.nccl_available
        report["cuda_serializers"] = device_serializers_work(runtime.array_module)
        report["bfloat16"] = bfloat16_obstacle(runtime.array_module)
    return report


def decide_device_type(
    requested: str,
    reports: Mapping[str, Mapping],
    devices: int,
    names: Sequence[str] = (),
    share_gpu: bool = False,
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
    if requested == "auto" and (without or len(reports) < devices):
        return "cpu"
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
    if not share_gpu:
        refuse_shared_gpus(reports, labels)
    return "gpu"


def shared_gpus(reports: Mapping[str, Mapping]) -> dict[tuple[str, str], list[str]]:
    """``{(host, GPU UUID): worker addresses}`` for every GPU that more than one worker
    computes on.

    Examples
    --------
    >>> one = {"gpu": True, "host": "h", "gpu_identity": "GPU-1"}
    >>> shared_gpus({"a": one, "b": one, "c": {**one, "gpu_identity": "GPU-2"}})
    {('h', 'GPU-1'): ['a', 'b']}
    """
    by_gpu: dict[tuple[str, str], list[str]] = {}
    for address, report in reports.items():
        identity = report.get("gpu_identity")
        if report.get("gpu") and identity:
            by_gpu.setdefault((str(report.get("host")), str(identity)), []).append(address)
    return {gpu: addresses for gpu, addresses in by_gpu.items() if len(addresses) > 1}


def refuse_shared_gpus(reports: Mapping[str, Mapping], labels: Mapping[str, str]) -> None:
    shared = shared_gpus(reports)
    if not shared:
        return
    (host, identity), addresses = next(iter(shared.items()))
    workers = " and ".join(labels.get(address, address) for address in addresses)
    raise DeviceError(
        f"--share-gpu: {workers} compute on the same GPU ({identity} on {host}); NCCL "
        "refuses two ranks on one GPU and the workers would share its memory. Start one "
        "worker per GPU (dask cuda worker, or CUDA_VISIBLE_DEVICES per worker), or add "
        "--share-gpu to run them anyway (every strategy but --allreduce nccl, collectives "
        "staged through host memory)"
    )


def nccl_obstacle(
    reports: Mapping[str, Mapping], labels: Mapping[str, str] | None = None
) -> str | None:
    """Why the run's GPU workers cannot all-reduce with NCCL (None: they can).

    Examples
    --------
    >>> one = {"gpu": True, "host": "h", "gpu_identity": "GPU-1", "nccl": True}
    >>> nccl_obstacle({"a": one, "b": {**one, "gpu_identity": "GPU-2"}}) is None
    True
    >>> nccl_obstacle({"a": one, "b": {**one, "nccl": False}}).split(" (")[0]
    'NCCL did not load on b'
    """
    labels = labels or {}
    missing = [address for address, report in reports.items() if not report.get("nccl")]
    if missing:
        return (
            f"NCCL did not load on {', '.join(labels.get(a, a) for a in missing)} "
            "(cupy.cuda.nccl.available is False; pip install nvidia-nccl-cu13, or -cu12)"
        )
    shared = shared_gpus(reports)
    if shared:
        addresses = next(iter(shared.values()))
        return (
            f"{' and '.join(labels.get(a, a) for a in addresses)} share a GPU (--share-gpu), "
            "and NCCL refuses two ranks on one GPU"
        )
    return None


def bfloat16_missing(
    reports: Mapping[str, Mapping], labels: Mapping[str, str] | None = None
) -> str | None:
    """Why some GPU worker of the run cannot compute in bfloat16, naming it (None: all can).

    Examples
    --------
    >>> bfloat16_missing({"a": {"bfloat16": None}, "b": {"bfloat16": "cupy 13.6.0 cannot"}})
    'on b: cupy 13.6.0 cannot'
    """
    labels = labels or {}
    for address, report in reports.items():
        if report.get("bfloat16"):
            return f"on {labels.get(address, address)}: {report['bfloat16']}"
    return None


def check_device_serializers(reports: Mapping[str, Mapping], labels: Mapping[str, str]) -> None:
    """GPU workers that talk UCX hand device arrays to distributed's CUDA serializers (over
    TCP the workbench stages them through host memory itself); refuse a UCX worker where
    those do not load, naming it and what to install."""
    lacking = [
        address
        for address, report in reports.items()
        if address.startswith(("ucx://", "ucxx://")) and not report.get("cuda_serializers")
    ]
    if lacking:
        raise DeviceError(
            f"--protocol: ucx moves device arrays through distributed's CUDA serializers, "
            f"which need numba (and rmm to receive) on every worker; missing on "
            f"{', '.join(labels.get(a, a) for a in lacking)} (pip install "
            "'dtrain-workbench[ucx-cu13]', or ucx-cu12)"
        )
