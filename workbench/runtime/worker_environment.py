"""The environment of every worker process the workbench starts, CPU or GPU.

Set before each worker process is spawned (glibc reads its malloc variables at process start,
BLAS its thread counts at import). One BLAS/OpenMP thread per worker: a worker is one device
running one kernel stream. glibc's malloc thresholds fixed (mmap 32 MiB, trim 256 MiB; as
``dtrain bench`` fixes them, see benchmarks/timing.py): distributed's default
``MALLOC_TRIM_THRESHOLD_=65536`` hands freed step temporaries back to the OS, so steps
page-fault their buffers in again (docs/architecture/dask-costs.md, "What Dask costs", has the
measurement).

dask-cuda's ``LocalCUDACluster`` replaces any ``env=`` it is given with each worker's
``CUDA_VISIBLE_DEVICES``, so both kinds of cluster take these variables from distributed's
``distributed.nanny.pre-spawn-environ`` setting instead, which every nanny applies.

Three of Dask's timers wake these workers' event loops less (:data:`WORKER_CONFIG`), since
each wake-up takes the interpreter lock from the device's thread as it comes back from a
kernel: the sampling profiler is off (every 10 ms it walks the running task's stack; the
workbench's own phase events say where a step goes), the loop's health tick runs every second,
not every 20 ms (a loop blocked for longer than its 3 s limit is still reported), and the
system monitor samples every 5 s, not every 500 ms, without the host's disk counters (its
samples feed Dask's own dashboard plots; the workbench's views read the run's events and their
own probes). The costs are measured in docs/architecture/dask-costs.md, "What Dask costs".
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

WORKER_ENVIRONMENT = {
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "MALLOC_MMAP_THRESHOLD_": str(32 << 20),
    "MALLOC_TRIM_THRESHOLD_": str(256 << 20),
}


# Dask settings of the workers the workbench starts (each nanny hands its worker the
# configuration it was made under; a local cluster's scheduler, made in the same block, ticks
# once a second too).
WORKER_CONFIG = {
    "distributed.worker.profile.enabled": False,
    "distributed.admin.tick.interval": "1s",
    "distributed.admin.system-monitor.interval": "5s",
    "distributed.admin.system-monitor.disk": False,
}

WORKER_PRIORITY_PRELOAD = "workbench.runtime.worker_priority"


def worker_preloads() -> list[str]:
    """The preloads of a worker the workbench starts: the user's
    (``distributed.worker.preload``), then the one that lowers its priority
    (:mod:`workbench.runtime.worker_priority`)."""
    import dask

    configured = dask.config.get("distributed.worker.preload", default=[]) or []
    return [*([configured] if isinstance(configured, str) else configured), WORKER_PRIORITY_PRELOAD]


@contextlib.contextmanager
def worker_environment() -> Iterator[None]:
    """While workers spawn: :data:`WORKER_ENVIRONMENT` in their nannies' pre-spawn setting,
    and :data:`WORKER_CONFIG` in the configuration the nannies hand their workers.

    Distributed lets a variable already in this process's environment override its config,
    and its nannies copy their pre-spawn variables into this process's environment (so the
    first cluster's values would stick), hence the values are put there too while the
    workers spawn, and the previous ones restored afterwards.
    """
    import dask

    pre_spawn = {
        **dask.config.get("distributed.nanny.pre-spawn-environ", default={}),
        **WORKER_ENVIRONMENT,
    }
    previous = {name: os.environ.get(name) for name in WORKER_ENVIRONMENT}
    os.environ.update(WORKER_ENVIRONMENT)
    try:
        with dask.config.set({"distributed.nanny.pre-spawn-environ": pre_spawn, **WORKER_CONFIG}):
            yield
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
