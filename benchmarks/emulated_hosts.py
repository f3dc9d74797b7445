"""Several hosts on one machine: network namespaces joined by a bridge, each host's link to it
rate-limited, a Dask scheduler and workers started inside them.

Each emulated host is a network namespace with one address (``10.213.0.<host + 1>``) and a
``/dev/shm`` of its own (a tmpfs per host, bound over ``/dev/shm`` in each of its processes'
mount namespaces); its workers listen on that address, so the workbench sees them as on
different hosts: peers on one host use the shared-memory channels (they see each other's
segments), peers on different hosts cannot, and go over TCP, through the host's virtual link (a
veth pair to a bridge in a namespace of its own), whose two directions are each limited to
``rate`` by a token-bucket queue (``tc qdisc ... tbf``). This process joins the bridge too,
unlimited, so a client here reaches the scheduler as it would a real cluster's.

Everything is torn down on exit, including after an error: the processes (terminated, then
killed), the namespaces (which takes their links with them), the hosts' /dev/shm file
systems. Needs Linux, root, ``ip`` and ``tc`` (iproute2); :func:`why_hosts_cannot_be_emulated`
says what is missing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from benchmarks.suite import SuiteUnavailable
from workbench.runtime.worker_environment import WORKER_ENVIRONMENT

SUBNET = "10.213.0"  # host k is SUBNET.(k + 1); this process is SUBNET.254
CLIENT_ADDRESS = f"{SUBNET}.254"


class HostsUnavailable(SuiteUnavailable):
    """This machine cannot emulate hosts (not Linux, not root, no iproute2)."""


@dataclass(frozen=True)
class EmulatedHosts:
    """A running emulated cluster: where its scheduler listens, its hosts' namespaces and
    addresses, and the rate each host's link is limited to."""

    scheduler_address: str
    namespaces: tuple[str, ...]
    host_addresses: tuple[str, ...]
    workers_per_host: int
    rate: str
    links: tuple[str, ...] = ()  # each host's end of its link (in its namespace)

    @property
    def devices(self) -> int:
        return len(self.namespaces) * self.workers_per_host

    def link_bytes(self) -> list[tuple[int, int]]:
        """Bytes each host has sent and received over its link so far (its interface's
        counters: everything that crossed the shaped link, whatever sent it)."""
        return [
            (_counter(namespace, link, "tx_bytes"), _counter(namespace, link, "rx_bytes"))
            for namespace, link in zip(self.namespaces, self.links)
        ]


def _counter(namespace: str, link: str, name: str) -> int:
    # sysfs as the namespace sees it: ``ip netns exec`` mounts the namespace's own /sys.
    path = f"/sys/class/net/{link}/statistics/{name}"
    read = subprocess.run(
        ["ip", "netns", "exec", namespace, "cat", path], capture_output=True, text=True, check=True
    )
    return int(read.stdout)


def why_hosts_cannot_be_emulated() -> str | None:
    """None when :func:`emulated_hosts` can run here, else the reason."""
    if not sys.platform.startswith("linux"):
        return "network namespaces need Linux"
    if os.geteuid() != 0:
        return "network namespaces need root"
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        return f"{' and '.join(missing)} not found (install iproute2)"
    return None


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        raise HostsUnavailable(f"{' '.join(argv)}: {done.stderr.strip() or done.returncode}")


def _limit(namespace: str | None, device: str, rate: str) -> None:
    """Egress of ``device`` at ``rate``: a token bucket whose queue holds a generous 200 ms,
    so a burst waits instead of being dropped (drops would make TCP, not the rate, the
    limit)."""
    _run(
        *(("ip", "netns", "exec", namespace) if namespace else ()),
        *("tc", "qdisc", "add", "dev", device, "root"),
        *("tbf", "rate", rate, "burst", "256kb", "latency", "200ms"),
    )


def _link(prefix: str, index: int, switch: str, namespace: str | None, address: str, rate):
    """A veth pair from ``namespace`` (None: this one) to the bridge; ``rate`` limits both
    directions (None: unlimited)."""
    inner, outer = f"{prefix}i{index}", f"{prefix}o{index}"  # interface names: <= 15 chars
    place = ["netns", namespace] if namespace else []
    _run("ip", "link", "add", inner, *place, "type", "veth", "peer", "name", outer, "netns", switch)
    in_namespace = ["ip", "-n", namespace] if namespace else ["ip"]
    _run(*in_namespace, "addr", "add", f"{address}/24", "dev", inner)
    _run(*in_namespace, "link", "set", inner, "up")
    _run("ip", "-n", switch, "link", "set", outer, "master", "br0")
    _run("ip", "-n", switch, "link", "set", outer, "up")
    if rate is not None:
        _limit(namespace, inner, rate)  # uploads
        _limit(switch, outer, rate)  # downloads


# ``ip netns exec`` runs its command in a mount namespace of its own: there the host's tmpfs
# is bound over /dev/shm before the command starts.
_WITH_HOST_SHM = 'mount --bind "$0" /dev/shm && exec "$@"'


def _start(namespace: str, shm: Path, argv: list[str], log: Path) -> subprocess.Popen:
    # What the workbench's own local clusters give their workers (one BLAS thread, no
    # trimming of freed memory every step).
    environment = {**os.environ, **WORKER_ENVIRONMENT}
    with open(log, "wb") as output:
        return subprocess.Popen(
            ["ip", "netns", "exec", namespace, "sh", "-c", _WITH_HOST_SHM, str(shm), *argv],
            stdout=output,
            stderr=subprocess.STDOUT,
            env=environment,
            start_new_session=True,  # its own process group: stopped as one
        )


def _stop(processes: list[subprocess.Popen]) -> None:
    for process in processes:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    for process in processes:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)


def _wait_for_workers(scheduler_address: str, count: int, timeout: float, logs: Path) -> None:
    from distributed import Client

    try:
        with Client(scheduler_address, timeout=timeout, set_as_default=False) as client:
            client.wait_for_workers(count, timeout=timeout)
    except Exception as error:
        tails = "\n".join(
            f"--- {log.name}\n{log.read_text(errors='replace')[-1500:]}"
            for log in sorted(logs.glob("*.log"))
        )
        raise HostsUnavailable(f"the emulated cluster did not start: {error}\n{tails}") from None


@contextlib.contextmanager
def emulated_hosts(
    hosts: int = 2, workers_per_host: int = 2, rate: str = "1gbit", timeout: float = 60.0
) -> Iterator[EmulatedHosts]:
    """Start ``hosts`` emulated hosts of ``workers_per_host`` Dask workers each (one thread
    each, named by rank: host-major), links limited to ``rate`` (a tc rate: ``1gbit``,
    ``200mbit``), the scheduler on host 0; yield them; tear everything down."""
    reason = why_hosts_cannot_be_emulated()
    if reason is not None:
        raise HostsUnavailable(reason)
    prefix = f"dtw{os.getpid() % 100000}"
    switch = f"{prefix}sw"
    namespaces = [f"{prefix}h{host}" for host in range(hosts)]
    addresses = [f"{SUBNET}.{host + 1}" for host in range(hosts)]
    created: list[str] = []
    mounted: list[Path] = []
    processes: list[subprocess.Popen] = []
    with tempfile.TemporaryDirectory(prefix="dtrain-hosts-") as folder:
        logs = Path(folder)
        shms = [logs / f"shm-{host}" for host in range(hosts)]
        try:
            for shm in shms:
                shm.mkdir(mode=0o1777)
                _run("mount", "-t", "tmpfs", "-o", "size=1g,mode=1777", "tmpfs", str(shm))
                mounted.append(shm)
            _run("ip", "netns", "add", switch)
            created.append(switch)
            _run("ip", "-n", switch, "link", "add", "br0", "type", "bridge")
            _run("ip", "-n", switch, "link", "set", "br0", "up")
            for host, (namespace, address) in enumerate(zip(namespaces, addresses)):
                _run("ip", "netns", "add", namespace)
                created.append(namespace)
                _run("ip", "-n", namespace, "link", "set", "lo", "up")
                _link(prefix, host, switch, namespace, address, rate)
            _link(prefix, hosts, switch, None, CLIENT_ADDRESS, None)
            port = 8786
            scheduler = f"tcp://{addresses[0]}:{port}"
            python = sys.executable
            processes.append(
                _start(
                    namespaces[0],
                    shms[0],
                    [
                        *(python, "-m", "distributed.cli.dask_scheduler", "--host", addresses[0]),
                        *("--port", str(port), "--no-dashboard"),
                    ],
                    logs / "scheduler.log",
                )
            )
            for host, (namespace, address) in enumerate(zip(namespaces, addresses)):
                for local in range(workers_per_host):
                    rank = host * workers_per_host + local
                    processes.append(
                        _start(
                            namespace,
                            shms[host],
                            [
                                *(python, "-m", "distributed.cli.dask_worker", scheduler),
                                *("--host", address, "--nthreads", "1", "--name", str(rank)),
                                *("--no-nanny", "--no-dashboard", "--memory-limit", "0"),
                            ],
                            logs / f"worker-{rank}.log",
                        )
                    )
            _wait_for_workers(scheduler, hosts * workers_per_host, timeout, logs)
            yield EmulatedHosts(
                scheduler,
                tuple(namespaces),
                tuple(addresses),
                workers_per_host,
                rate,
                links=tuple(f"{prefix}i{host}" for host in range(hosts)),
            )
        finally:
            _stop(processes)
            for shm in mounted:
                with contextlib.suppress(HostsUnavailable, subprocess.TimeoutExpired):
                    _run("umount", str(shm))
            for namespace in reversed(created):
                with contextlib.suppress(HostsUnavailable, subprocess.TimeoutExpired):
                    _run("ip", "netns", "del", namespace)
