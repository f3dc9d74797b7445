"""Which Dask cluster a run uses, and joining it.

A run starts a local cluster of its own when none is named, or joins one the user has: a
scheduler's address (``--cluster``), a scheduler file (``--scheduler-file``: what ``dask
scheduler --scheduler-file`` and batch-system deployments write), or, from Python, a
``distributed.Client`` or any Dask cluster object (``LocalCluster``, ``LocalCUDACluster``,
dask-jobqueue's ``SLURMCluster``, dask-kubernetes' ``KubeCluster``, a dask-gateway cluster).
What the user made stays theirs: a run never closes the user's client or cluster, only a
client it opened itself. ``--wait-for-workers`` lets the workers join after the run asked
for them (a batch system starts them when it can), with progress, and fails naming how many
joined.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workbench.config import ConfigError, RunConfig
from workbench.runtime.scheduler_probe import SchedulerProbeError, probe_scheduler

Progress = Callable[[str], None]
POLL_SECONDS = 0.25  # how often a waiting run looks again for its scheduler file or workers
PROBE_SECONDS = 10.0  # the longest a scheduler may take to answer a new connection
MAX_SCHEDULER_FILE_BYTES = 2**20


class ClusterError(RuntimeError):
    """The cluster cannot be started, reached, or does not have the devices a run needs."""


@dataclass(frozen=True)
class ClusterTarget:
    """The cluster a run joins (all None: it starts its own)."""

    address: str | None = None
    scheduler_file: str | None = None
    client: Any = None  # a distributed.Client the user made
    cluster: Any = None  # a Dask cluster object the user made
    # --tls-ca-file, --tls-cert, --tls-key (None: Dask's distributed.comm.tls config decides)
    tls: tuple[str | None, str | None, str | None] | None = None

    @classmethod
    def of(cls, config: RunConfig) -> ClusterTarget:
        """The target ``config`` names (``cluster`` may be an address or, from Python, a
        client or a cluster object).

        Examples
        --------
        >>> ClusterTarget.of(RunConfig(cluster="tcp://10.0.0.5:8786")).describe()
        'the scheduler at tcp://10.0.0.5:8786'
        >>> ClusterTarget.of(RunConfig()).starts_its_own
        True
        """
        value = config.cluster
        files = (config.tls_ca_file, config.tls_cert, config.tls_key)
        tls = files if any(path is not None for path in files) else None
        if value is None or isinstance(value, str):
            return cls(address=value, scheduler_file=config.scheduler_file, tls=tls)
        if is_client(value):
            return cls(client=value)
        if hasattr(value, "scheduler_address"):
            return cls(cluster=value)
        raise ConfigError(
            "--cluster",
            "takes a scheduler address, a distributed.Client or a Dask cluster object "
            f"(LocalCluster, SLURMCluster, KubeCluster, ...), got {type(value).__name__}",
        )

    @property
    def starts_its_own(self) -> bool:
        return self.address is self.scheduler_file is self.client is self.cluster is None

    def describe(self) -> str:
        if self.starts_its_own:
            return "the local cluster"
        if self.address is not None:
            return f"the scheduler at {self.address}"
        if self.scheduler_file is not None:
            return f"the scheduler named in {self.scheduler_file}"
        if self.client is not None:
            return f"the client's scheduler at {address_of(self.client)}"
        return f"the cluster's scheduler at {address_of(self.cluster)}"

    def connect(self, timeout: float, wait: float | None, progress: Progress) -> tuple[Any, bool]:
        """A client of the target's scheduler, and whether the run owns it (closes it).
        ``wait``: seconds a scheduler file may take to appear (None: it must exist)."""
        from distributed import Client

        if self.client is not None:
            return self.client, False
        options: dict[str, Any] = {"timeout": timeout, "set_as_default": False}
        if self.tls is not None:
            options["security"] = self.security()
        try:
            if self.cluster is not None:
                return Client(self.cluster, **options), True
            address = self.address
            if self.scheduler_file is not None:
                path = Path(self.scheduler_file).expanduser()
                _wait_for_file(path, wait or 0.0, progress)
                address = read_scheduler_file(path)
            probe_scheduler(address, self.ssl_context(), min(timeout, PROBE_SECONDS))
            return Client(address, **options), True
        except (OSError, TimeoutError) as error:
            raise ClusterError(f"{self.flag}: cannot reach {self.describe()}: {error}") from None
        except SchedulerProbeError as error:
            raise ClusterError(f"{self.flag}: {error}") from None

    def ssl_context(self) -> ssl.SSLContext | None:
        """The client's TLS context for a probe: from ``--tls-*`` files, else Dask's
        ``distributed.comm.tls`` configuration (None when neither sets one)."""
        from distributed.security import Security

        security = self.security() if self.tls is not None else Security()
        return security.get_connection_args("client").get("ssl_context")

    def security(self) -> Any:
        """The client's TLS credentials from ``--tls-ca-file``, ``--tls-cert``, ``--tls-key``
        (encryption required: a tls:// scheduler only)."""
        from distributed.security import Security

        ca_file, cert, key = (
            None if path is None else str(Path(path).expanduser()) for path in self.tls or ()
        )
        return Security(
            tls_ca_file=ca_file, tls_client_cert=cert, tls_client_key=key, require_encryption=True
        )

    @property
    def flag(self) -> str:
        return "--scheduler-file" if self.scheduler_file is not None else "--cluster"


def is_client(value: Any) -> bool:
    """Whether ``value`` is a ``distributed.Client`` (checked without importing distributed
    where it was never imported)."""
    return any(
        kind.__name__ == "Client" and "distributed" in kind.__module__
        for kind in type(value).__mro__
    )


def address_of(value: Any) -> str:
    """The scheduler address of a client or a cluster object."""
    if is_client(value):
        return str(value.scheduler.address)
    return str(value.scheduler_address)


def read_scheduler_file(path: Path) -> str:
    """The scheduler address in a scheduler file (JSON with an ``address``), read only from
    a regular file of sane size (a FIFO would block, ``/dev/zero`` never end)."""
    import json
    import os
    import stat

    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as error:
        raise ClusterError(f"--scheduler-file: cannot open {path}: {error.strerror}") from None
    with os.fdopen(descriptor, "rb") as file:
        status = os.fstat(file.fileno())
        if not stat.S_ISREG(status.st_mode):
            raise ClusterError(f"--scheduler-file: {path} is not a regular file")
        if status.st_size > MAX_SCHEDULER_FILE_BYTES:
            raise ClusterError(
                f"--scheduler-file: {path} has {status.st_size} bytes; a scheduler file is "
                f"a small JSON document (at most {MAX_SCHEDULER_FILE_BYTES})"
            )
        text = file.read(MAX_SCHEDULER_FILE_BYTES + 1)
    try:
        address = json.loads(text).get("address")
    except (ValueError, AttributeError):
        address = None
    if not isinstance(address, str) or not address:
        raise ClusterError(
            f"--scheduler-file: {path} is not a Dask scheduler file (JSON with an address, as "
            "dask scheduler --scheduler-file writes)"
        )
    return address


def _wait_for_file(path: Path, seconds: float, progress: Progress) -> None:
    deadline = time.monotonic() + seconds
    told = False
    while not path.exists():
        if time.monotonic() >= deadline:
            raise ClusterError(
                f"--scheduler-file: {path} does not exist"
                + (f" (no scheduler wrote it within {seconds:g} s)" if seconds else "")
                + "; start the scheduler with dask scheduler --scheduler-file "
                f"{path}, or give --wait-for-workers SECONDS to wait for it"
            )
        if not told:
            progress(f"[cluster] waiting for a scheduler to write {path}")
            told = True
        time.sleep(POLL_SECONDS)


def wait_for_workers(
    client: Any, devices: int, seconds: float | None, where: str, progress: Progress
) -> dict[str, Any]:
    """The scheduler's workers once at least ``devices`` have joined (at once when
    ``seconds`` is None), telling ``progress`` each time more join."""
    deadline = time.monotonic() + (seconds or 0.0)
    told = -1
    while True:
        workers = client.scheduler_info(n_workers=-1)["workers"]
        if len(workers) >= devices:
            return workers
        if seconds is None:
            raise ClusterError(
                f"--devices: {devices} devices requested but {where} has {len(workers)} "
                "workers (give --wait-for-workers SECONDS to wait for more to join)"
            )
        if time.monotonic() >= deadline:
            raise ClusterError(
                f"--wait-for-workers: {len(workers)} of the {devices} workers the run needs "
                f"joined {where} within {seconds:g} s"
            )
        if len(workers) != told:
            progress(f"[cluster] {len(workers)} of {devices} workers joined {where}; waiting")
            told = len(workers)
        time.sleep(POLL_SECONDS)
