"""Cluster lifecycle: start (or connect to) a Dask cluster with one device per worker, and
always close what the workbench started.

Local clusters use processes with one thread each (a device runs one kernel stream at a time),
listen on 127.0.0.1 only, and name workers ``task-N`` so device names, worker names and the
dashboard agree. With GPUs, ``dask_cuda.LocalCUDACluster`` pins one GPU per worker. Their
dashboard answers only the link shown to the user (it carries a token), and their scratch
files go to a private directory removed when they close (docs/security/dashboard.md).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from workbench.config import RunConfig
from workbench.data import ARRAYS_KIND
from workbench.runtime.cluster_target import (
    ClusterError,
    ClusterTarget,
    Progress,
    wait_for_workers,
)
from workbench.runtime.dashboard_guard import guarded_extensions, link_with_token, new_token
from workbench.runtime.device_probe import (
    bfloat16_missing,
    check_device_serializers,
    decide_device_type,
    describe_device,
    nccl_obstacle,
)
from workbench.runtime.devices import DeviceError, device_name
from workbench.runtime.gpu_runtime import gpu_runtime, missing_gpu_reason
from workbench.runtime.janitor import start_janitor
from workbench.runtime.local_cluster import local_cpu_cluster
from workbench.runtime.preflight import preflight
from workbench.runtime.quiet_logs import quiet_dask_logs
from workbench.runtime.scratch import make_scratch_directory, sweep_stale_scratch_directories
from workbench.runtime.shared_memory import sweep_stale_run_directories, unlink_run_segments
from workbench.runtime.worker_service import DeviceService

# Data sets a local cluster gets from the client rather than loading them again on this host,
# where the client holds them already: small ones whose loading costs far more than sending
# them (digits is scikit-learn's, and importing scikit-learn in a worker would come before the
# run's first step; docs/architecture/dask-costs.md, "What Dask costs").
SHIPPED_TO_LOCAL_CLUSTERS = ("digits",)


@dataclass
class ClusterSession:
    """A connected client plus the workers used as devices, in rank order."""

    client: Any  # a distributed.Client (distributed ships no type information)
    addresses: list[str]
    device_names: list[str]
    device_type: str
    dashboard_link: str | None
    owned: list = field(default_factory=list)  # what this session started and must close
    # Why NCCL cannot reduce between these devices (None: it can, or they are CPUs); an
    # ``--allreduce auto`` run then takes the ring (docs/architecture/devices.md, "Devices: CPU
    # and GPU").
    nccl_obstacle: str | None = None
    bfloat16_obstacle: str | None = None  # why a GPU worker has no bfloat16 (--precision)
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    earlier_run_ids: list[str] = field(default_factory=list)  # before recoveries

    @property
    def nccl_usable(self) -> bool:
        return self.device_type == "gpu" and self.nccl_obstacle is None

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


def local_device_type(requested: str, devices: int, share_gpu: bool = False) -> str:
    """The device type of a local cluster of ``devices`` workers on this machine, decided
    before it starts: ``gpu`` needs a GPU per device (any GPU at all with ``share_gpu``),
    ``auto`` takes GPUs only if there are enough for every device."""
    if requested == "cpu":
        return "cpu"
    runtime = gpu_runtime()
    available = runtime.device_count() if runtime is not None else 0
    if requested == "auto":
        enough = available > 0 and (share_gpu or devices <= available)
        return "gpu" if runtime is not None and enough else "cpu"
    if runtime is None:
        raise DeviceError(f"--device-type: gpu was requested but {missing_gpu_reason()}")
    if devices > available and not share_gpu:
        raise DeviceError(
            f"--devices: {devices} GPU devices requested but this machine has {available} "
            "GPUs (add --share-gpu to put several devices on one GPU)"
        )
    return "gpu"


def workers_per_gpu(devices: int, share_gpu: bool) -> int:
    """How many of a local cluster's ``devices`` workers compute on each GPU of this machine
    (1 unless ``share_gpu`` and there are fewer GPUs than devices)."""
    runtime = gpu_runtime()
    available = runtime.device_count() if runtime is not None else 0
    if not share_gpu or available == 0:
        return 1
    return -(-devices // available)


def _check_protocol(protocol: str) -> None:
    # Distributed keeps a ``ucx`` placeholder that only raises; the real comms are the
    # distributed-ucxx package's.
    if protocol == "ucx" and importlib.util.find_spec("distributed_ucxx") is None:
        raise DeviceError(
            f"--protocol: {protocol} is not available here; it needs the distributed-ucxx "
            "package (pip install distributed-ucxx-cu12), or use tcp"
        )


def _local_cluster(
    devices: int,
    device_type: str,
    scheduler_options: dict,
    protocol: str,
    share_gpu: bool,
    dashboard_token: str,
    local_directory: str,
):
    if protocol != "tcp":
        _check_protocol(protocol)
    security = local_security(protocol)
    # The scheduler runs in this process: the token reaches it in memory, never in a
    # command line or a file (docs/security/dashboard.md).
    scheduler_options = {
        **scheduler_options,
        "extensions": guarded_extensions(dashboard_token, scheduler_options.get("extensions")),
        "local_directory": local_directory,
    }
    if device_type == "gpu":
        runtime = gpu_runtime()
        assert runtime is not None  # local_device_type decided gpu
        sharing = workers_per_gpu(devices, share_gpu)
        return runtime.local_cluster(
            devices, protocol, scheduler_options, security, sharing, local_directory
        )
    return local_cpu_cluster(
        devices, protocol, scheduler_options, security, local_directory=local_directory
    )


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


def sweep_leftovers() -> None:
    """Remove what this user's crashed runs left on this host (shared memory, scratch
    directories) before a new local cluster starts (``dtrain gc`` does the same on demand);
    a sweep that fails must not keep the run from starting."""
    for sweep in (sweep_stale_run_directories, sweep_stale_scratch_directories):
        with contextlib.suppress(OSError):
            sweep()


def _dashboard_link(client, token: str | None) -> str | None:
    """The dashboard address shown to the user: with the token of a cluster started here."""
    link = getattr(client, "dashboard_link", None)
    return link_with_token(link, token) if link and token else link


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
        share_gpu=config.share_gpu,
    ) as session:
        yield session


def ships_dataset(config: RunConfig) -> bool:
    """Whether the client sends the run's data set to the workers (``--ship-data``, arrays
    given to ``fit``, or a small data set for a local cluster: see
    :data:`SHIPPED_TO_LOCAL_CLUSTERS`) instead of each host loading it."""
    if config.ship_data or config.dataset.startswith(f"{ARRAYS_KIND}:"):
        return True
    return config.dataset in SHIPPED_TO_LOCAL_CLUSTERS and ClusterTarget.of(config).starts_its_own


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
    share_gpu: bool = False,
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
    None: the client sends the data set). Two devices on one GPU are refused unless
    ``share_gpu``.
    """
    jobs = jobs or (("worker", devices),)
    target = address if isinstance(address, ClusterTarget) else ClusterTarget(address=address)
    quiet_dask_logs()  # Dask's nanny lines and large-graph warning are not the user's news
    from distributed import Client

    owned: list[Any] = []  # the janitor, the scratch directory, the cluster
    client = session = dashboard_token = None
    owns_client = True
    try:
        if target.starts_its_own:
            # Decided before anything starts.
            device_type = local_device_type(device_type, devices, share_gpu)
            sweep_leftovers()
            owned.append(start_janitor())  # closed last: told all went well
            scratch = make_scratch_directory()
            owned.insert(0, scratch)  # removed after the cluster, which closes first
            dashboard_token = new_token()
            cluster = _local_cluster(
                devices,
                device_type,
                scheduler_options or {},
                protocol,
                share_gpu,
                dashboard_token,
                scratch.path,
            )
            owned.insert(0, cluster)
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
        in_order = {address: reports[address] for address in ordered}
        device_type = decide_device_type(device_type, in_order, devices, labels, share_gpu)
        if device_type == "gpu":
            check_device_serializers(in_order, dict(zip(ordered, labels)))
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
            dashboard_link=_dashboard_link(client, dashboard_token),
            owned=owned,
            nccl_obstacle=(
                nccl_obstacle(in_order, dict(zip(ordered, labels)))
                if device_type == "gpu"
                else None
            ),
            bfloat16_obstacle=(
                bfloat16_missing(in_order, dict(zip(ordered, labels)))
                if device_type == "gpu"
                else None
            ),
        )
        yield session
    finally:
        if client is not None and owns_client:
            with contextlib.suppress(Exception):
                client.close()
        for cluster in owned:  # the cluster, its scratch directory, then the janitor
            with contextlib.suppress(Exception):
                cluster.close()
        if session is not None:
            # A worker killed mid-run (or retired while it still held the run) left its run
            # directory on its host; sweep those of this host, whoever owns the cluster (a
            # recovered run used one run id per attempt; what another process still holds stays).
            for run_id in {session.run_id, *session.earlier_run_ids}:
                unlink_run_segments(run_id)
