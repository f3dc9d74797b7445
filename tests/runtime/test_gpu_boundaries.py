"""Where the workbench meets CuPy, NCCL, distributed and dask-cuda: the double is as strict as
the real libraries there (each behaviour is cited in the double's docstrings), and the
workbench's side of each boundary does what the real libraries need."""

from __future__ import annotations

import pickle
import sys
import types

import dask
import numpy as np
import pytest
from distributed.protocol import serialize

from tests.gpu_double import fake_cupy, fake_nccl
from tests.gpu_double.runtime import RUNTIME
from workbench.parallel.collectives.nccl import decode_unique_id, encode_unique_id
from workbench.runtime import gpu_runtime
from workbench.runtime.device_arrays import DeviceArrays

pytestmark = pytest.mark.gpu_path


def test_the_doubles_nccl_takes_the_unique_id_only_as_cupy_14_makes_it(monkeypatch, tmp_path):
    monkeypatch.setenv("DTRAIN_FAKE_NCCL_DIR", str(tmp_path))
    unique_id = fake_nccl.get_unique_id()
    assert isinstance(unique_id, bytes) and len(unique_id) == 128
    as_tuple = tuple(unique_id)
    with pytest.raises(TypeError, match=r"expected bytes, got tuple"):
        fake_nccl.NcclCommunicator(1, as_tuple, 0)
    with pytest.raises(ValueError, match=r"commId length 10 != 128\."):
        fake_nccl.NcclCommunicator(1, b"0123456789", 0)
    monkeypatch.setenv("DTRAIN_FAKE_CUPY_MAJOR", "13")
    old_id = fake_nccl.get_unique_id()
    assert isinstance(old_id, tuple) and min(old_id) >= -128 and max(old_id) <= 127
    with pytest.raises(TypeError, match=r"expected tuple, got bytes"):
        fake_nccl.NcclCommunicator(1, unique_id, 0)
    # The workbench carries either across the transport unchanged.
    for made in (unique_id, old_id):
        assert decode_unique_id(encode_unique_id(made)) == made


def test_without_nccl_its_module_imports_but_has_nothing_but_available(monkeypatch):
    monkeypatch.setenv("DTRAIN_FAKE_NCCL", "0")
    assert fake_nccl.available is False and RUNTIME.nccl_available is False
    with pytest.raises(AttributeError, match="has no attribute 'get_unique_id'"):
        fake_nccl.get_unique_id()  # the attribute itself is missing, as in CuPy


def test_device_arrays_pickle_as_a_host_copy_but_dask_cannot_serialize_them_without_numba():
    on_device = fake_cupy.asarray(np.arange(4.0))
    back = pickle.loads(pickle.dumps(on_device))
    assert isinstance(back, fake_cupy.ndarray)
    np.testing.assert_array_equal(back.get(), np.arange(4.0))
    if "numba" in sys.modules or _importable("numba"):
        pytest.skip("numba is installed here: distributed's CuPy serializers work")
    with pytest.raises(TypeError, match="Could not serialize object of type ndarray"):
        serialize(on_device, on_error="raise")


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def test_device_arrays_go_to_dasks_comms_through_host_memory_except_over_ucx(cpu_double_gpus):
    device = DeviceArrays.for_kind("gpu")
    on_device = device.to_device(np.arange(3.0))
    staged = device.for_the_wire(on_device, "tls")
    assert isinstance(staged, np.ndarray)
    serialize(staged, on_error="raise")  # what the comms are handed serializes
    assert device.for_the_wire(on_device, "ucx") is on_device
    host = np.ones(2)
    assert device.for_the_wire(host, "tcp") is host  # CPU runs: no copy


def test_the_gpu_count_follows_cuda_visible_devices(monkeypatch):
    # NVML counts every GPU of the machine; the process sees what the variable lets it.
    monkeypatch.setattr(gpu_runtime, "_nvml_device_count", lambda: 4)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert gpu_runtime._cuda_device_count() == 4
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2")
    assert gpu_runtime._cuda_device_count() == 1
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert gpu_runtime._cuda_device_count() == 0


def test_without_nvml_the_gpu_count_is_the_cuda_runtimes(monkeypatch):
    monkeypatch.setattr(gpu_runtime, "_nvml_device_count", lambda: 0)
    runtime = types.SimpleNamespace(getDeviceCount=lambda: 3)
    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=runtime))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    assert gpu_runtime._cuda_device_count() == 3


def test_the_doubles_devices_follow_a_visible_devices_variable(monkeypatch):
    monkeypatch.setenv("DTRAIN_FAKE_GPUS", "4")
    monkeypatch.setenv("DTRAIN_FAKE_VISIBLE_DEVICES", "2,0")
    assert RUNTIME.device_count() == 2
    assert RUNTIME.device_identity().endswith("000000000002")


@pytest.mark.parametrize(
    "error",
    [
        fake_cupy.OutOfMemoryError(1024),
        fake_cupy.CUDARuntimeError(2),  # cudaErrorMemoryAllocation
        fake_cupy.CUBLASError(3),  # CUBLAS_STATUS_ALLOC_FAILED
    ],
    ids=lambda e: type(e).__name__,
)
def test_out_of_memory_is_recognised_wherever_the_device_ran_out(error):
    assert RUNTIME.is_out_of_memory(error)


def test_other_cuda_errors_are_not_out_of_memory():
    assert not RUNTIME.is_out_of_memory(fake_cupy.CUBLASError(13))
    assert not RUNTIME.is_out_of_memory(RuntimeError("out of memory"))


def test_a_local_gpu_cluster_keeps_arrays_resident_and_one_thread_per_worker(monkeypatch):
    """dask-cuda would spill device memory to the host at 80% by default, and drops any
    ``env=`` it is given: the workbench turns spilling off and sets the workers' variables
    through distributed's pre-spawn setting, as for CPU clusters."""
    started = {}

    class LocalCUDACluster:
        def __init__(self, **options):
            started.update(options)
            started["pre-spawn"] = dict(dask.config.get("distributed.nanny.pre-spawn-environ"))
            started["profile"] = dask.config.get("distributed.worker.profile.enabled")
            started["tick"] = dask.config.get("distributed.admin.tick.interval")
            started["monitor"] = dask.config.get("distributed.admin.system-monitor.interval")

    monkeypatch.setitem(
        sys.modules, "dask_cuda", types.SimpleNamespace(LocalCUDACluster=LocalCUDACluster)
    )
    gpu_runtime._local_cuda_cluster(4, "tcp", {}, None, workers_per_gpu=1)
    assert started["device_memory_limit"] == 0 and started["memory_limit"] == 0
    assert started["threads_per_worker"] == 1 and started["n_workers"] == 4
    assert started["pre-spawn"]["OMP_NUM_THREADS"] == "1"
    assert started["pre-spawn"]["MALLOC_TRIM_THRESHOLD_"] == str(256 << 20)
    # Fewer wake-ups of the workers' event loops: no profiler, a tick a second, the system
    # monitor once in 5 s.
    assert started["profile"] is False and started["tick"] == "1s"
    assert started["monitor"] == "5s"
    # One worker per GPU: dask-cuda pins them itself (shared GPUs never reach it:
    # tests/runtime/test_shared_gpu_cluster.py).
    assert "CUDA_VISIBLE_DEVICES" not in started
    assert started["preload"][-1] == "workbench.runtime.worker_priority"  # yields the cores
