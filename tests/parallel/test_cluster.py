"""Runs on an existing Dask cluster (``--cluster``), as on several hosts."""

import pytest
from distributed import LocalCluster

from workbench.config import RunConfig
from workbench.launch.runner import run_training
from workbench.runtime.cluster import ClusterError

pytestmark = pytest.mark.integration


@pytest.fixture
def external_cluster():
    cluster = LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    )
    yield cluster
    cluster.close()


def test_mirrored_on_an_existing_cluster_matches_a_local_run(
    external_cluster, no_leftover_processes
):
    flags = {"strategy": "mirrored", "devices": 2, "steps": 10, "hidden": (16,), "dtype": "float64"}
    remote = run_training(
        RunConfig(cluster=external_cluster.scheduler_address, **flags), progress=lambda _: None
    )
    local = run_training(RunConfig(**flags), progress=lambda _: None)
    for name, value in local.parameters.items():
        assert abs(remote.parameters[name] - value).max() <= 1e-12
    # The workbench did not close a cluster it did not start.
    assert len(external_cluster.scheduler_info["workers"]) == 2


def test_more_devices_than_the_cluster_has_is_refused(external_cluster):
    config = RunConfig(
        strategy="mirrored", devices=4, steps=2, cluster=external_cluster.scheduler_address
    )
    refused = r"--devices: 4 devices requested but the scheduler at .* has 2 workers"
    with pytest.raises(ClusterError, match=refused):
        run_training(config, progress=lambda _: None)
