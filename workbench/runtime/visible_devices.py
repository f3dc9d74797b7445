"""``CUDA_VISIBLE_DEVICES``: which GPUs a process may use, read as the CUDA runtime reads it.

NVML (what Dask's diagnostics count with) sees every physical GPU whatever the variable says,
so a count for this process narrows NVML's by the variable. The CUDA runtime takes the
comma-separated entries in order and stops at the first that names no GPU of the machine; a
list that repeats a GPU, or an empty value, hides every GPU. Entries are indices or UUIDs
(``GPU-...``, ``MIG-...``).
"""

from __future__ import annotations


def visible_device_count(variable: str | None, physical: int) -> int:
    """How many of ``physical`` GPUs a process with ``CUDA_VISIBLE_DEVICES=variable`` sees
    (None: the variable is not set).

    Examples
    --------
    >>> visible_device_count(None, 4), visible_device_count("", 4), visible_device_count("2", 4)
    (4, 0, 1)
    >>> visible_device_count("0,1,7,2", 4)  # stops at 7, which this machine does not have
    2
    >>> visible_device_count("GPU-8a1f0c2e-5b6d-4e7f-9a0b-1c2d3e4f5a6b,1", 2)
    2
    >>> visible_device_count("1,1", 2)  # a repeated GPU hides every GPU
    0
    """
    if variable is None:
        return physical
    seen: list[str] = []
    for entry in variable.split(","):
        entry = entry.strip()
        if entry.isdigit():
            valid = int(entry) < physical
        else:
            valid = entry.startswith(("GPU-", "MIG-")) and len(entry) > 4
        if entry in seen:
            return 0  # CUDA 13 (driver 580) then reports "invalid device ordinal" for every GPU
        if not valid:
            break
        seen.append(entry)
    return min(len(seen), physical)


def rotated_visible_devices(entries: list[str]) -> list[str]:
    """``CUDA_VISIBLE_DEVICES`` for each of ``len(entries)`` workers, as dask-cuda gives them:
    worker i's list starts with entry i, so its device 0 is its own GPU.

    Examples
    --------
    >>> rotated_visible_devices(["0", "1", "2"])
    ['0,1,2', '1,2,0', '2,0,1']
    """
    return [",".join(entries[i:] + entries[:i]) for i in range(len(entries))]


def gpus_of_workers(devices: int, workers_per_gpu: int) -> list[str]:
    """The GPU index each of ``devices`` workers computes on, ``workers_per_gpu`` to a GPU.

    Examples
    --------
    >>> gpus_of_workers(3, 2)
    ['0', '0', '1']
    """
    return [str(worker // workers_per_gpu) for worker in range(devices)]


def visible_devices_of_workers(devices: int, workers_per_gpu: int) -> list[str]:
    """``CUDA_VISIBLE_DEVICES`` for each of ``devices`` workers, ``workers_per_gpu`` to a GPU:
    dask-cuda's rotation with one worker per GPU; with more, each worker's own GPU first and
    every other GPU once (a list that repeated a GPU would hide them all).

    Examples
    --------
    >>> visible_devices_of_workers(2, 1)
    ['0,1', '1,0']
    >>> visible_devices_of_workers(3, 2)
    ['0,1', '0,1', '1,0']
    """
    gpus = gpus_of_workers(devices, workers_per_gpu)
    if workers_per_gpu == 1:
        return rotated_visible_devices(gpus)
    distinct = list(dict.fromkeys(gpus))
    return [",".join([gpu, *(other for other in distinct if other != gpu)]) for gpu in gpus]
