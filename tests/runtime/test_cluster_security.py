"""Clusters the workbench starts speak TLS with credentials only this process holds: a plain
TCP client, a TLS client without credentials and one with credentials of its own are all
refused. A tls:// cluster the user started is joined with ``--tls-ca-file``, ``--tls-cert``
and ``--tls-key``. The run store is readable by its owner only."""

from __future__ import annotations

import gc
import os
import socket
import ssl
from pathlib import Path

import pytest
from distributed import Client
from distributed.comm.addressing import get_address_host_port
from distributed.security import Security

from workbench.config import ConfigError, RunConfig
from workbench.launch.runner import run_training
from workbench.runtime.cluster import start_cluster
from workbench.store import RunStore

from .dask_cli import RUN, Processes


@pytest.fixture(scope="module")
def started():
    with start_cluster(2, "cpu") as session:
        yield session


@pytest.mark.integration
def test_a_started_cluster_speaks_tls_on_every_address(started):
    address = started.client.scheduler.address
    assert address.startswith("tls://127.0.0.1:")
    assert all(worker.startswith("tls://") for worker in started.addresses)
    # The run's own client holds the credentials and works.
    assert started.client.submit(sum, [1, 2], pure=False).result() == 3


@pytest.mark.integration
def test_a_plain_tcp_client_is_refused(started):
    plain = started.client.scheduler.address.replace("tls://", "tcp://")
    with pytest.raises(OSError):
        Client(plain, timeout=3, set_as_default=False)
    _collect_refused_clients()


@pytest.mark.integration
def test_a_tls_client_without_the_clusters_credentials_is_refused(started):
    address = started.client.scheduler.address
    with pytest.raises((OSError, TypeError)):
        Client(address, timeout=3, security=Security(require_encryption=True))
    _collect_refused_clients()
    with pytest.raises(OSError, match="certificate"):
        Client(address, timeout=3, security=Security.temporary(), set_as_default=False)
    _collect_refused_clients()


def _collect_refused_clients() -> None:
    """Finalise a client that failed to connect now, while no lock of its loop runner is
    held: left to a later garbage collection, its ``__del__`` can run inside that runner's
    locked section and wait on its own lock forever (seen once, until the test timed out)."""
    gc.collect()


def _first_byte_without_a_certificate(host: str, port: int) -> bytes:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # accepts any server certificate, shows none
    with socket.create_connection((host, port), timeout=5) as raw, context.wrap_socket(raw) as tls:
        tls.sendall(b"\0" * 64)
        return tls.recv(1)


@pytest.mark.integration
def test_a_tls_handshake_that_skips_verification_gets_nothing(started):
    """Even a client that accepts any server certificate must show one the cluster issued:
    refused in the handshake, or the connection closed without a byte."""
    host, port = get_address_host_port(started.client.scheduler.address)
    try:
        answer = _first_byte_without_a_certificate(host, port)
    except (ssl.SSLError, OSError):
        return
    assert answer == b""


def _credentials(folder: Path) -> dict[str, str]:
    """One certificate and key for every role (what Security.temporary makes), as files."""
    security = Security.temporary()
    files = {
        "ca": security.tls_ca_file,
        "cert": security.tls_scheduler_cert,
        "key": security.tls_scheduler_key,
    }
    paths = {}
    for name, contents in files.items():
        path = folder / f"{name}.pem"
        path.write_text(contents)
        path.chmod(0o600)
        paths[name] = str(path)
    return paths


@pytest.mark.integration
def test_a_tls_cluster_started_elsewhere_is_joined_with_the_tls_flags(tmp_path):
    processes = Processes(tmp_path)
    try:
        files = _credentials(tmp_path)
        tls = ["--tls-ca-file", files["ca"], "--tls-cert", files["cert"], "--tls-key", files["key"]]
        scheduler_file = tmp_path / "scheduler.json"
        processes.scheduler(scheduler_file, "--protocol", "tls", *tls)
        for name in ("0", "1"):
            processes.worker(scheduler_file, name, *tls)
        config = RunConfig(
            **RUN,
            scheduler_file=str(scheduler_file),
            wait_for_workers=60,
            tls_ca_file=files["ca"],
            tls_cert=files["cert"],
            tls_key=files["key"],
        )
        result = run_training(config, progress=lambda line: None)
        assert result.summary["steps"] == RUN["steps"]
    finally:
        processes.close()


def test_tls_files_are_checked_before_anything_starts(tmp_path):
    with pytest.raises(ConfigError, match=r"--tls-ca-file: .* is not a file"):
        run_training(
            RunConfig(**RUN, cluster="tls://127.0.0.1:9", tls_ca_file=str(tmp_path / "no.pem"))
        )
    (tmp_path / "cert.pem").write_text("x")
    with pytest.raises(ConfigError, match="--tls-key: the certificate and its private key"):
        run_training(
            RunConfig(**RUN, cluster="tls://127.0.0.1:9", tls_cert=str(tmp_path / "cert.pem"))
        )
    with pytest.raises(ConfigError, match="--tls-cert: is a credential for a tls:// cluster"):
        run_training(RunConfig(**RUN, tls_cert=str(tmp_path / "cert.pem")))


def test_a_new_run_store_is_readable_by_its_owner_only(tmp_path):
    store = RunStore(tmp_path / "fresh" / "runs")
    store.create("run-1", {"strategy": "one-device"}, steps=1)
    assert os.stat(store.root).st_mode & 0o777 == 0o700
