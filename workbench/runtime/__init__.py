"""Runtime: device types, array modules and (for distributed strategies) the Dask cluster.

What flows in: ``--device-type`` and, later, ``--cluster``. What flows out: the array module
kernels run with and device names used in events. GPU packages load lazily.
"""

from workbench.runtime.devices import (
    DeviceError,
    array_module,
    device_name,
    device_tag,
    gpu_count,
    resolve_device_type,
    to_host,
)

__all__ = [
    "DeviceError",
    "array_module",
    "device_name",
    "device_tag",
    "gpu_count",
    "resolve_device_type",
    "to_host",
]
