"""Several devices on one GPU, on the CPU double (``pytest -m gpu_path``): refused by name
unless the run asks for it (``--share-gpu``), and then every strategy but NCCL runs, its
collectives staged through host memory, ending where one device ends."""

from __future__ import annotations

import pytest
from distributed import LocalCluster

from tests.parallel.test_equivalence import BASE, assert_same_parameters
from workbench.cli.main import main
from workbench.config import RunConfig
from workbench.launch.runner import run_training

pytestmark = [pytest.mark.gpu_path, pytest.mark.usefixtures("no_leftover_processes")]
QUIET = {"progress": lambda _: None}
SMALL = {**BASE, "steps": 4}


def gpu_run(**flags):
    return run_training(RunConfig(device_type="gpu", dtype="float64", **SMALL, **flags), **QUIET)


@pytest.mark.integration
def test_two_plain_workers_on_one_gpu_are_refused_naming_them_unless_shared(cpu_double_gpus):
    # ``dask worker --nworkers 2`` on a GPU host: both workers compute on its first GPU.
    with LocalCluster(n_workers=2, threads_per_worker=1, host="127.0.0.1") as cluster:
        with pytest.raises(Exception, match="--share-gpu") as refusal:
            gpu_run(strategy="mirrored", devices=2, cluster=cluster)
        message = str(refusal.value)
        assert "compute on the same GPU" in message and "worker 0" in message
        shared = gpu_run(strategy="mirrored", devices=2, cluster=cluster, share_gpu=True)
    assert shared.summary["allreduce"] == "ring"  # auto: NCCL refuses two ranks on one GPU
    assert_same_parameters(shared, gpu_run(), 1e-10)


@pytest.mark.integration
@pytest.mark.parametrize(
    "flags",
    [
        {"strategy": "mirrored"},
        {"strategy": "parameter-server", "ps": 1},
        {"strategy": "pipeline", "stages": 2},
    ],
    ids=lambda f: f["strategy"],
)
def test_one_gpu_runs_every_strategy_on_several_devices_with_share_gpu(cpu_double_gpus, flags):
    cpu_double_gpus.setenv("DTRAIN_FAKE_GPUS", "1")
    result = gpu_run(devices=2, share_gpu=True, **flags)
    assert result.summary["device_type"] == "gpu"
    assert_same_parameters(result, gpu_run(), 1e-10)


def test_share_gpu_refuses_nccl_and_cpus_before_anything_starts(capsys):
    flags = ["run", "--strategy", "mirrored", "--devices", "2", "--share-gpu"]
    assert main([*flags, "--allreduce", "nccl"]) == 2
    assert "--allreduce" in capsys.readouterr().err
    assert main([*flags, "--device-type", "cpu"]) == 2
    assert "--share-gpu" in capsys.readouterr().err
