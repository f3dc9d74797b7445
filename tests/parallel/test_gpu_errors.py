"""What a user sees when the GPUs are not what the run asks for: each a clear message naming
the field or the device, exit status 2 for input errors, and nothing left running."""

import importlib.util
import json
import os
import subprocess
import sys

import pytest

from workbench.cli.main import main

pytestmark = pytest.mark.gpu_path

SMALL = ["--steps", "3", "--hidden", "16", "--dtype", "float64"]


def dtrain(capsys, *flags):
    code = main(["run", *flags])
    captured = capsys.readouterr()
    dtrain.out = captured.out
    return code, captured.err


def test_a_gpu_run_without_a_gpu_names_the_flag_and_what_is_missing(
    capsys, monkeypatch, no_leftover_processes
):
    monkeypatch.delenv("DTRAIN_GPU_RUNTIME", raising=False)
    code, err = dtrain(capsys, "--strategy", "mirrored", "--devices", "2", "--device-type", "gpu")
    assert code == 2
    assert "--device-type: gpu was requested but" in err
    assert "no NVIDIA GPU was found" in err or "CuPy is not installed" in err


def test_more_devices_than_gpus_names_both_numbers(capsys, cpu_double_gpus, no_leftover_processes):
    cpu_double_gpus.setenv("DTRAIN_FAKE_GPUS", "2")
    code, err = dtrain(
        capsys, "--strategy", "mirrored", "--devices", "4", "--device-type", "gpu", *SMALL
    )
    assert code == 2
    assert "--devices: 4 GPU devices requested but this machine has 2 GPUs" in err


@pytest.mark.integration
def test_auto_takes_gpus_only_when_every_device_has_one(capsys, cpu_double_gpus):
    cpu_double_gpus.setenv("DTRAIN_FAKE_GPUS", "1")
    code, err = dtrain(capsys, "--strategy", "mirrored", "--devices", "2", *SMALL, "--json")
    assert code == 0, err
    assert json.loads(dtrain.out)["device_type"] == "cpu"


@pytest.mark.integration
def test_a_mix_of_gpu_and_cpu_workers_is_refused_naming_the_cpu_ones(
    capsys, cpu_double_gpus, no_leftover_processes
):
    from distributed import LocalCluster

    cpu_double_gpus.delenv("DTRAIN_GPU_RUNTIME")  # the first worker: CPU only
    with LocalCluster(
        n_workers=1, threads_per_worker=1, host="127.0.0.1", dashboard_address=":0"
    ) as cluster:
        from tests.gpu_double.runtime import SELECTOR

        environment = {**os.environ, "DTRAIN_GPU_RUNTIME": SELECTOR}
        gpu_worker = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "distributed.cli.dask_worker",
                cluster.scheduler_address,
                "--nthreads",
                "1",
                "--name",
                "1",
                "--no-dashboard",
                "--host",
                "127.0.0.1",
            ],
            env=environment,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            with cluster.get_client() as client:
                client.wait_for_workers(2, timeout=60)
            flags = ["--strategy", "mirrored", "--devices", "2", *SMALL]
            flags += ["--cluster", cluster.scheduler_address]
            code, err = dtrain(capsys, *flags, "--device-type", "gpu")
            assert code == 2
            assert "a mix of GPU and CPU workers" in err
            cpu_worker = next(iter(cluster.workers.values())).worker_address
            assert cpu_worker in err and "without a GPU" in err
            # auto: not every device has a GPU, so the run takes the CPUs
            code, err = dtrain(capsys, *flags, "--json")
            assert code == 0, err
            assert json.loads(dtrain.out)["device_type"] == "cpu"
        finally:
            gpu_worker.terminate()
            gpu_worker.wait(30)


@pytest.mark.integration
def test_running_out_of_gpu_memory_names_the_device_the_step_and_the_bytes(
    capsys, cpu_double_gpus, no_leftover_processes
):
    # Any allocation over 4 MiB fails: the variables and the data set fit, the first step's
    # 256 x 4096 float64 activation of a replica (8 MiB) does not.
    cpu_double_gpus.setenv("DTRAIN_FAKE_GPU_MEMORY", str(4 << 20))
    flags = ["--strategy", "mirrored", "--devices", "2", "--device-type", "gpu"]
    code, err = dtrain(
        capsys,
        *flags,
        "--hidden",
        "4096",
        "--batch-size",
        "512",
        "--steps",
        "2",
        "--dtype",
        "float64",
    )
    assert code == 1
    assert "/job:worker/task:" in err and "device:GPU:0 ran out of GPU memory at step 0" in err
    assert "8,388,608 bytes requested" in err  # 256 rows per replica x 4096 x 8 bytes


@pytest.mark.integration
def test_ucx_without_its_package_is_refused_before_anything_starts(capsys, no_leftover_processes):
    if importlib.util.find_spec("distributed_ucxx") is not None:
        pytest.skip("UCX comms are installed here")
    code, err = dtrain(capsys, "--strategy", "mirrored", "--devices", "2", "--protocol", "ucx")
    assert code == 2
    assert "--protocol: ucx is not available here" in err and "distributed-ucxx" in err


def test_protocol_belongs_to_clusters_the_workbench_starts(capsys):
    flags = ["--strategy", "mirrored", "--devices", "2", "--protocol", "ucx"]
    code, err = dtrain(capsys, *flags, "--cluster", "tcp://127.0.0.1:1")
    assert code == 2
    assert "--protocol" in err and "already uses its own" in err


@pytest.mark.integration
@pytest.mark.parametrize(
    ("raised_by", "said"),
    [("cublas", "CUBLAS_STATUS_ALLOC_FAILED"), ("cuda-runtime", "cudaErrorMemoryAllocation")],
)
def test_running_out_of_memory_inside_cuda_libraries_names_the_device_and_step(
    capsys, cpu_double_gpus, no_leftover_processes, raised_by, said
):
    # Not the memory pool's error: cuBLAS's workspace, or the allocator without the pool.
    cpu_double_gpus.setenv("DTRAIN_FAKE_GPU_MEMORY", str(4 << 20))
    cpu_double_gpus.setenv("DTRAIN_FAKE_GPU_MEMORY_ERROR", raised_by)
    flags = ["--strategy", "mirrored", "--devices", "2", "--device-type", "gpu", "--steps", "2"]
    code, err = dtrain(
        capsys, *flags, "--hidden", "4096", "--batch-size", "512", "--dtype", "float64"
    )
    assert code == 1
    assert "device:GPU:0 ran out of GPU memory at step 0: allocation failed" in err
    assert said in err
