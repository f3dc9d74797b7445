"""Workers sharing a GPU (``--share-gpu``) start on a real machine: dask-cuda's
``LocalCUDACluster`` names each worker after the GPU it pins and refuses a second worker on
one, so the workbench must not hand it a list that repeats a GPU."""

import sys
import types

import pytest

from workbench.runtime import gpu_runtime


class StrictLocalCUDACluster:
    """dask-cuda 26.10's rule (``LocalCUDACluster.new_worker_spec``): worker names are the
    visible devices, ``min(set(visible) - set(named))`` each, so a repeated GPU leaves a
    worker without a name."""

    def __init__(self, n_workers=None, CUDA_VISIBLE_DEVICES=None, **options):
        visible = (CUDA_VISIBLE_DEVICES or "0,1,2,3").split(",")
        named: set[str] = set()
        for _ in range(n_workers or len(visible)):
            free = set(visible) - named
            if not free:
                raise ValueError("Can not scale beyond visible devices", visible)
            named.add(min(free))
        self.workers = sorted(named)


@pytest.fixture
def strict_dask_cuda(monkeypatch):
    module = types.ModuleType("dask_cuda")
    module.LocalCUDACluster = StrictLocalCUDACluster
    monkeypatch.setitem(sys.modules, "dask_cuda", module)
    started = []

    def plain_cluster(devices, protocol, scheduler_options, security, environments, directory):
        started.append([environment["CUDA_VISIBLE_DEVICES"] for environment in environments])
        return "plain cluster"

    monkeypatch.setattr(gpu_runtime, "local_cpu_cluster", plain_cluster)
    return started


def test_workers_sharing_a_gpu_each_see_their_own_gpu_first(strict_dask_cuda):
    made = gpu_runtime._local_cuda_cluster(3, "tcp", {}, workers_per_gpu=2)
    assert made == "plain cluster"
    assert strict_dask_cuda == [["0,1", "0,1", "1,0"]]


def test_one_worker_per_gpu_is_dask_cudas_own_cluster(strict_dask_cuda):
    made = gpu_runtime._local_cuda_cluster(2, "tcp", {}, workers_per_gpu=1)
    assert isinstance(made, StrictLocalCUDACluster) and made.workers == ["0", "1"]
    assert strict_dask_cuda == []
