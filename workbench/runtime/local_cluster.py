"""A local cluster of single-threaded worker processes, each with its own variables where
given: how the workbench starts CPU devices, and GPU devices that share GPUs (dask-cuda's
``LocalCUDACluster`` refuses a second worker on one GPU)."""

from __future__ import annotations

from collections.abc import Sequence

from workbench.runtime.worker_environment import worker_environment, worker_preloads


def local_cpu_cluster(
    devices: int,
    protocol: str,
    scheduler_options: dict,
    security=None,
    environments: Sequence[dict[str, str]] = (),
    local_directory: str | None = None,
):
    """A local cluster of ``devices`` single-threaded worker processes on 127.0.0.1, over TLS
    with ``security`` (see :func:`local_security`); worker i gets ``environments[i]`` on top
    of :data:`WORKER_ENVIRONMENT` where given. Its nannies and workers keep their scratch
    files in ``local_directory`` (see :mod:`workbench.runtime.scratch`)."""
    from distributed import LocalCluster

    with worker_environment():
        cluster = LocalCluster(
            n_workers=0 if environments else devices,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            memory_limit=0,
            protocol="tls" if security is not None else protocol,
            security=security,
            scheduler_kwargs=scheduler_options,  # e.g. the dashboard pages' preload
            local_directory=local_directory,
            preload=worker_preloads(),  # workers yield the cores to the notebook and browser
        )
        if environments:
            _start_workers_with(cluster, list(environments)[:devices])
    return cluster


def _start_workers_with(cluster, environments: list[dict[str, str]]) -> None:
    """Start one worker per entry, each with its own variables (a nanny's ``env``), as
    dask-cuda gives each worker its own ``CUDA_VISIBLE_DEVICES``."""
    template = cluster.new_spec
    for index, environment in enumerate(environments):
        options = {**template["options"], "env": dict(environment)}
        cluster.worker_spec[index] = {"cls": template["cls"], "options": options}
    cluster.sync(cluster._correct_state)
    cluster.wait_for_workers(len(environments))
