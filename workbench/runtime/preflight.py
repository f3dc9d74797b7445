"""Checks before a run's first task on a cluster it joined (one the user started elsewhere).

A worker with another version of the workbench, Dask or NumPy would run other code than the
client planned (a graph, a message or a pickled spec that means something else there), and a
worker that cannot read the data set would fail at its first step, one device at a time.
Both are found here, in one round trip to the workers, and reported as one error naming the
worker and the difference. (Whether each worker has the device kind the run asks for is
checked as the workers report their devices: :mod:`workbench.runtime.device_probe`.)
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from typing import Any

from workbench.data import DatasetError, dataset_path
from workbench.runtime.cluster_target import ClusterError

# What must match between the client and every worker (cupy too, on GPUs).
CHECKED_PACKAGES = ("workbench", "dask", "distributed", "numpy")


def installed_versions(device_type: str) -> dict[str, str | None]:
    """The versions this process imports (None: not installed).

    Examples
    --------
    >>> sorted(installed_versions("cpu"))
    ['dask', 'distributed', 'numpy', 'workbench']
    """
    packages = [*CHECKED_PACKAGES, *(("cupy",) if device_type == "gpu" else ())]
    versions: dict[str, str | None] = {}
    for package in packages:
        try:
            versions[package] = str(importlib.import_module(package).__version__)
        except ImportError:
            versions[package] = None
    return versions


def data_set_problem(spec: str) -> str | None:
    """Why this process cannot read the data set ``spec`` names (None: it can, or the data
    set is made in memory).

    Examples
    --------
    >>> data_set_problem("digits") is None
    True
    >>> data_set_problem("mnist:/no/such/folder")
    '/no/such/folder does not exist'
    """
    try:
        path = dataset_path(spec)
    except DatasetError as error:
        return str(error)
    if path is None:
        return None
    if not path.exists():
        return f"{path} does not exist"
    if path.is_dir():
        if not os.access(path, os.R_OK | os.X_OK):
            return f"{path} is not readable (permission denied)"
        try:
            entries = list(path.iterdir())
        except OSError as error:
            return f"{path} cannot be listed: {error}"
        unreadable = [entry.name for entry in entries if not os.access(entry, os.R_OK)]
        if unreadable:
            return f"{path}: {', '.join(sorted(unreadable)[:3])} not readable (permission denied)"
        return None
    if not os.access(path, os.R_OK):
        return f"{path} is not readable (permission denied)"
    return None


def _worker_report(device_type: str, dataset: str | None) -> dict[str, Any]:
    problem = data_set_problem(dataset) if dataset is not None else None
    return {"versions": installed_versions(device_type), "data": problem}


def preflight(
    client: Any,
    workers: Sequence[str],
    worker_names: Sequence[str],
    device_type: str,
    dataset: str | None,
) -> None:
    """Raise :class:`ClusterError` naming the first worker (``worker_names``: how messages
    call them) whose versions differ from this client's, or that cannot read ``dataset``
    (None: the client sends the data set, so the workers need not read it)."""
    mine = installed_versions(device_type)
    reports = client.run(_worker_report, device_type, dataset, workers=list(workers))
    for address, name in zip(workers, worker_names):
        report = reports[address]
        differences = [
            f"{package} {report['versions'].get(package) or 'not installed'} "
            f"(the client has {version or 'none'})"
            for package, version in mine.items()
            if report["versions"].get(package) != version
        ]
        if differences:
            raise ClusterError(
                f"{name} runs {', '.join(differences)}: every worker needs the client's "
                "versions (install the same environment on the workers)"
            )
        if report["data"] is not None:
            raise ClusterError(
                f"--dataset: {name} cannot read {dataset}: {report['data']} (each host loads "
                "the data set itself: give it the same path on every host, e.g. on a shared "
                "file system, or add --ship-data to send this client's copy, once per host)"
            )
