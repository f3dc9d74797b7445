"""The GPU runtime seam, the strict CuPy double behind the GPU-path tests, and the device-type
decision from the workers' reports."""

import numpy as np
import pytest

from tests.gpu_double import fake_cupy
from tests.gpu_double.runtime import HostArrayInDeviceKernel, guard_kernels
from workbench.ir import Executable, GraphBuilder, ops
from workbench.runtime.device_arrays import DeviceArrays
from workbench.runtime.device_probe import decide_device_type
from workbench.runtime.devices import DeviceError, array_namespace, resolve_device_type, to_host
from workbench.runtime.gpu_runtime import gpu_runtime

pytestmark = pytest.mark.gpu_path


def test_the_double_refuses_every_implicit_host_device_conversion():
    x = fake_cupy.asarray(np.arange(3.0))
    with pytest.raises(TypeError):
        np.asarray(x)
    with pytest.raises(TypeError):
        x + np.ones(3)
    with pytest.raises(TypeError):
        np.ones(3) + x
    with pytest.raises(TypeError):
        np.add(x, x)
    with pytest.raises(TypeError):
        fake_cupy.exp(np.ones(3))
    with pytest.raises(TypeError):
        x[np.array([0, 1])]  # indices must be moved to the device explicitly
    # ... and allows what CuPy allows: scalars, explicit copies, 0-d to float
    y = x * np.float64(2.0) + 1
    assert float(y.sum()) == 9.0
    np.testing.assert_array_equal(fake_cupy.asnumpy(y), [1.0, 3.0, 5.0])
    assert x.device.id == 0 and array_namespace(x) is fake_cupy


def test_on_the_double_a_kernel_given_a_numpy_array_fails_the_step():
    guard_kernels()
    builder = GraphBuilder()
    x = builder.placeholder("x", (2,), "float64")
    executable = Executable(builder.build({"y": ops.exp(x) * x}))
    np.testing.assert_array_equal(
        fake_cupy.asnumpy(executable.run({"x": fake_cupy.zeros(2)}, xp=fake_cupy)["y"]), [0, 0]
    )
    with pytest.raises(Exception) as failure:
        executable.run({"x": np.zeros(2)}, xp=fake_cupy)
    assert isinstance(failure.value.__cause__, HostArrayInDeviceKernel)
    assert "received a NumPy array" in str(failure.value)


def test_device_arrays_copy_to_and_from_the_device(cpu_double_gpus):
    device = DeviceArrays.for_kind("gpu", "/job:worker/task:0/device:GPU:0")
    on_device = device.to_device(np.arange(4.0))
    assert isinstance(on_device, fake_cupy.ndarray) and device.on_gpu
    assert device.adopt(on_device) is on_device
    assert isinstance(device.adopt(np.ones(2)), fake_cupy.ndarray)
    host = to_host(on_device)
    assert isinstance(host, np.ndarray)
    host[0] = 99.0  # a copy: the device array is untouched
    assert float(on_device[0]) == 0.0
    assert resolve_device_type("auto") == "gpu"


def test_a_gpu_device_without_a_gpu_is_named(monkeypatch):
    monkeypatch.delenv("DTRAIN_GPU_RUNTIME", raising=False)
    if gpu_runtime() is not None:
        pytest.skip("this machine has a GPU")
    with pytest.raises(DeviceError, match=r"task:3.*should be a GPU"):
        DeviceArrays.for_kind("gpu", "/job:worker/task:3/device:GPU:0")


GPU, CPU = {"gpu": True}, {"gpu": False, "reason": "no NVIDIA GPU was found"}


def test_the_run_uses_gpus_only_when_every_worker_has_one():
    assert decide_device_type("auto", {"a": GPU, "b": GPU}, 2) == "gpu"
    assert decide_device_type("auto", {"a": GPU, "b": CPU}, 2) == "cpu"
    assert decide_device_type("cpu", {"a": GPU, "b": GPU}, 2) == "cpu"
    assert decide_device_type("gpu", {"a": GPU, "b": GPU}, 2) == "gpu"


def test_a_gpu_run_on_mixed_workers_names_those_without_a_gpu():
    with pytest.raises(DeviceError) as error:
        decide_device_type("gpu", {"a": GPU, "b": CPU}, 2, ["worker 0", "worker 1"])
    assert "a mix of GPU and CPU workers" in str(error.value)
    assert "worker 1 (no NVIDIA GPU was found)" in str(error.value)
    assert "worker 0" not in str(error.value).split("without a GPU:")[1]
