"""NVML utilization and memory of each GPU device, as its worker last told the scheduler.

A Dask worker on a machine with NVIDIA drivers samples NVML itself and sends the figures with
every heartbeat (``metrics["gpu"]``: ``utilization`` in percent, ``memory-used`` in bytes;
older releases also keep ``gpu_utilization`` and ``gpu_memory_used``). Reading them from the
scheduler costs one small request per round of steps and nothing on the devices. CPU devices
have no such figures, and then this returns nothing.
"""

from __future__ import annotations

from workbench.runtime.cluster import ClusterSession


def heartbeat_gpu_metrics(workers: dict, addresses: list[str], names: list[str]) -> dict:
    """``{device name: (utilization percent, memory used in bytes)}`` from the scheduler's
    view of its workers (``Client.scheduler_info()["workers"]``).

    Examples
    --------
    >>> workers = {"tcp://a": {"metrics": {"gpu": {"utilization": 87, "memory-used": 2**30}}},
    ...            "tcp://b": {"metrics": {"cpu": 100.0}}}
    >>> heartbeat_gpu_metrics(workers, ["tcp://a", "tcp://b"], ["/gpu:0", "/gpu:1"])
    {'/gpu:0': (87.0, 1073741824)}
    """
    found = {}
    for address, name in zip(addresses, names):
        metrics = workers.get(address, {}).get("metrics", {})
        gpu = metrics.get("gpu") or {}
        utilization = gpu.get("utilization", metrics.get("gpu_utilization"))
        memory = gpu.get("memory-used", metrics.get("gpu_memory_used"))
        if utilization is not None and memory is not None:
            found[name] = (float(utilization), int(memory))
    return found


def gpu_metrics(session: ClusterSession) -> dict:
    """The session's GPU devices' latest NVML figures; empty on CPU devices."""
    if session.device_type != "gpu":
        return {}
    workers = session.client.scheduler_info(n_workers=-1).get("workers", {})
    return heartbeat_gpu_metrics(workers, session.addresses, session.device_names)


def this_process_gpu_metrics() -> tuple[float, int] | None:
    """(utilization percent, memory used in bytes) of this process's GPU from NVML, as a Dask
    worker samples it; None without NVML figures (no NVIDIA driver, or a stand-in runtime)."""
    try:
        from distributed.diagnostics import nvml

        if nvml.device_get_count() == 0:
            return None
        figures = nvml.real_time()
        utilization, memory = figures["utilization"], figures["memory-used"]
    except Exception:
        return None
    if utilization is None or memory is None:
        return None
    return float(utilization), int(memory)
