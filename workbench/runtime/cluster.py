"""Cluster lifecycle: start (or connect to) a Dask cluster with one device per worker, and
always close what the workbench started.

Local clusters use processes with one thread each (a device runs one kernel stream at a time),
listen on 127.0.0.1 only, and name workers ``task-N`` so device names, worker names and the
dashboard agree. With GPUs, ``dask_cuda.LocalCUDACluster`` pins one GPU per worker.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

from workbench.config import RunConfig
from workbench.data import ARRAYS_KIND
from workbench.runtime.cluster_target import (
    ClusterError,
    ClusterTarget,
    Progress,
    wait_for_workers,
)
from workbench.runtime.device_probe import decide_device_type, describe_device
from workbench.runtime.devices import DeviceError, device_name
from workbench.runtime.gpu_runtime import gpu_runtime, missing_gpu_reason
from workbench.runtime.preflight import preflight
from workbench.runtime.shared_memory import unlink_run_segments
from workbench.runtime.worker_service import DeviceService


@dataclass
class ClusterSession:
    """A connected client plus the workers used as devices, in rank order."""

    client: object
    addresses: list[str]
    device_names: list[str]
    device_type: str
    dashboard_link: str | None
    owned: list = field(default_factory=list)  # clusters this session started and must close
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    earlier_run_ids: list[str] = field(default_factory=list)  # before recoveries

    def rebind(self, addresses: list[str], device_names: list[str]) -> None:
        """Go on with these workers under a fresh run id (after a device failed): the old
        id's state, tensors and shared-memory segments belong to the failed attempt."""
        self.earlier_run_ids.append(self.run_id)
        self.run_id = uuid.uuid4().hex[:12]
        self.addresses, self.device_names = list(addresses), list(device_names)

    def close(self) -> None:
        errors = []
        for closable in [self.client, *self.owned]:
            try:
                closable.close()
            except Exception as error:  # keep closing the rest
                errors.append(error)
        self.owned.clear()
        if errors:
            raise ClusterError(f"closing the cluster failed: {errors[0]}")


# The worker environment, set before each worker process is spawned (glibc reads its malloc
# variables at process start, BLAS its thread counts at import). One BLAS/OpenMP thread per
# worker: a worker is one device running one kernel stream. glibc's malloc thresholds fixed
# (mmap 32 MiB, trim 256 MiB; as ``dtrain bench`` fixes them, see workbench/bench/timing.py):
# distributed's default ``MALLOC_TRIM_THRESHOLD_=65536`` hands freed step temporaries back to
# the OS, so steps page-fault their buffers in again. Measured on the 2-core development
# machine (reference MLP 784-512-512-10, mirrored on 2 devices, batch 256, 200 steps, 4 runs
# each, alternating; medians): minor page faults per step and device 3,878 -> 0, samples/s
# 9,400 -> 17,900; per step compute 12.3 -> 7.0 ms, all-reduce 12.2 -> 6.3 ms, update 1.9 ->
# 0.4 ms.
WORKER_ENVIRONMENT = {
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "MALLOC_MMAP_THRESHOLD_": str(32 << 20),
    "MALLOC_TRIM_THRESHOLD_": str(256 << 20),
}


def local_device_type(requested: str, devices: int) -> str:
    """The device type of a local cluster of ``devices`` workers on this machine, decided
    before it starts: ``gpu`` needs a GPU per device, ``auto`` takes GPUs only if there are
    enough for every device."""
    if requested == "cpu":
        return "cpu"
    runtime = gpu_runtime()
    available = runtime.device_count() if runtime is not None else 0
    if requested == "auto":
        return "gpu" if runtime is not None and devices <= available else "cpu"
    if runtime is None:
        raise DeviceError(f"--device-type: gpu was requested but {missing_gpu_reason()}")
    if devices > available:
        raise DeviceError(
            f"--devices: {devices} GPU devices requested but this machine has {available} GPUs"
        )
    return "gpu"


def _check_protocol(protocol: str) -> None:
    # Distributed keeps a ``ucx`` placeholder that only raises; the real comms are the
    # distributed-ucxx package's.
    if protocol == "ucx" and importlib.util.find_spec("distributed_ucxx") is None:
        raise DeviceError(
            f"--protocol: {protocol} is not available here; it needs the distributed-ucxx "
            "package (pip install distributed-ucxx-cu12), or use tcp"
        )


def _local_cluster(devices: int, device_type: str, scheduler_options: dict, protocol: str = "tcp"):
    if protocol != "tcp":
        _check_protocol(protocol)
    if device_type == "gpu":
        runtime = gpu_runtime()
        assert runtime is not None  # local_device_type decided gpu
        return runtime.local_cluster(devices, protocol, scheduler_options, local_security(protocol))
    return local_cpu_cluster(devices, protocol, scheduler_options, local_security(protocol))


def local_security(protocol: str):
    """Credentials for a cluster the workbench starts: a temporary TLS certificate made for
    it (``Security.temporary``), held in this process's memory and handed to the workers it
    spawns, so on a shared machine no other user (nor any other process) can connect and
    submit code to it. None over UCX (Dask's UCX comms have no TLS) and with
    ``DTRAIN_LOCAL_TLS=0`` (for measuring what TLS costs: ``dtrain bench ddp``)."""
    if protocol != "tcp" or os.environ.get("DTRAIN_LOCAL_TLS", "1") == "0":
        return None
    from distributed.security import Security

    return Security.temporary()


def local_cpu_cluster(devices: int, protocol: str, scheduler_options: dict, security=None):
    """A local cluster of ``devices`` single-threaded worker processes on 127.0.0.1, over TLS
    with ``security`` (see :func:`local_security`)."""
    import dask
    from distributed import LocalCluster

    # Distributed lets a variable already in this process's environment override its config,
    # and its nannies copy their pre-spawn variables into this process's environment (so the
    # first cluster's values would stick), hence the values are put there too while the
    # workers spawn, and the previous ones restored afterwards.
    pre_spawn = {
        **dask.config.get("distributed.nanny.pre-spawn-environ", default={}),
        **WORKER_ENVIRONMENT,
    }
    previous = {name: os.environ.get(name) for name in WORKER_ENVIRONMENT}
    os.environ.update(WORKER_ENVIRONMENT)
    try:
        with dask.config.set({"distributed.nanny.pre-spawn-environ": pre_spawn}):
            return LocalCluster(
                n_workers=devices,
                threads_per_worker=1,
                processes=True,
                host="127.0.0.1",
                dashboard_address="127.0.0.1:0",
                memory_limit=0,
                protocol="tls" if security is not None else protocol,
                security=security,
                scheduler_kwargs=scheduler_options,  # e.g. the dashboard pages' preload
            )
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _rank_key(name) -> tuple:
    text = str(name)
    return (0, int(text), "") if text.isdigit() else (1, 0, text)


@contextlib.contextmanager
def start_run_cluster(
    config: RunConfig,
    devices: int,
    device_type: str,
    jobs: tuple[tuple[str, int], ...] | None = None,
    scheduler_options: dict | None = None,
    progress: Progress = lambda line: None,
) -> Iterator[ClusterSession]:
    """:func:`start_cluster` for a run: the cluster ``config`` names (``--cluster``,
    ``--scheduler-file``, a client or cluster object) or a local one, waiting
    ``--wait-for-workers`` seconds for its workers, checked for the run's data set."""
    with start_cluster(
        devices,
        device_type,
        ClusterTarget.of(config),
        jobs=jobs,
        scheduler_options=scheduler_options,
        protocol=config.protocol,
        wait_seconds=config.wait_for_workers,
        progress=progress,
        dataset=None if ships_dataset(config) else config.dataset,
    ) as session:
        yield session


def ships_dataset(config: RunConfig) -> bool:
    """Whether the client sends the run's data set to the workers (``--ship-data``, or
    arrays given to ``fit``) instead of each host loading it."""
    return config.ship_data or config.dataset.startswith(f"{ARRAYS_KIND}:")


def ordered_workers(client) -> list[str]:
    """The cluster's worker addresses in rank order: by worker name, so ranks are stable
    across runs, and a worker a nanny restarted (same name, new address) keeps its rank."""
    workers = client.scheduler_info(n_workers=-1)["workers"]
    return sorted(workers, key=lambda addr: _rank_key(workers[addr].get("name", addr)))


@contextlib.contextmanager
def start_cluster(
    devices: int,
    device_type: str = "cpu",
    address: str | ClusterTarget | None = None,
    connect_timeout: float = 10.0,
    jobs: tuple[tuple[str, int], ...] | None = None,
    scheduler_options: dict | None = None,
    protocol: str = "tcp",
    wait_seconds: float | None = None,
    progress: Progress = lambda line: None,
    dataset: str | None = None,
) -> Iterator[ClusterSession]:
    """Yield a :class:`ClusterSession` with ``devices`` workers; close what was started.

    ``address``: the cluster to join (an address, or a :class:`ClusterTarget`: a scheduler
    file, the user's client or cluster object), None to start a local one. ``jobs`` names
    the devices by TF job, e.g. ``(("worker", 2), ("ps", 1))`` gives ``/job:worker/task:0``,
    ``/job:worker/task:1``, ``/job:ps/task:0`` (default: all workers). ``scheduler_options``
    go to the scheduler of a cluster started here, ``protocol`` is its comms.
    ``device_type`` (``auto``, ``cpu``, ``gpu``) is decided where the work runs: every
    worker of the run reports its device (:mod:`workbench.runtime.device_probe`). A joined
    cluster waits up to ``wait_seconds`` for its workers, and is checked before any task
    (:mod:`workbench.runtime.preflight`: versions, and that every worker reads ``dataset``;
    None: the client sends the data set).
    """
    jobs = jobs or (("worker", devices),)
    target = address if isinstance(address, ClusterTarget) else ClusterTarget(address=address)
    from distributed import Client

    owned = []
    client = session = None
    owns_client = True
    try:
        if target.starts_its_own:
            device_type = local_device_type(device_type, devices)  # before anything starts
            cluster = _local_cluster(devices, device_type, scheduler_options or {}, protocol)
            owned.append(cluster)
            client = Client(cluster, set_as_default=False)
        else:
            client, owns_client = target.connect(connect_timeout, wait_seconds, progress)
        workers = wait_for_workers(
            client,
            devices,
            None if target.starts_its_own else wait_seconds,
            target.describe(),
            progress,
        )
        ordered = ordered_workers(client)[:devices]
        reports = client.run(describe_device, workers=ordered)
        labels = [
            f"worker {workers[address].get('name', address)} ({address})" for address in ordered
        ]
        device_type = decide_device_type(
            device_type,
            {address: reports[address] for address in ordered},
            devices,
            labels,
        )
        if not target.starts_its_own:
            preflight(client, ordered, labels, device_type, dataset)
        client.register_plugin(DeviceService())
        session = ClusterSession(
            client=client,
            addresses=ordered,
            device_names=[
                device_name(device_type, task=task, job=job)
                for job, count in jobs
                for task in range(count)
            ],
            device_type=device_type,
            dashboard_link=getattr(client, "dashboard_link", None),
            owned=owned,
        )
        yield session
    finally:
        if client is not None and owns_client:
            with contextlib.suppress(Exception):
                client.close()
        for cluster in owned:
            with contextlib.suppress(Exception):
                cluster.close()
        if owned and session is not None:
            # Every worker of this run was on this host; one killed mid-run left its segments
            # (a recovered run used one run id per attempt).
            for run_id in {session.run_id, *session.earlier_run_ids}:
                unlink_run_segments(run_id)
