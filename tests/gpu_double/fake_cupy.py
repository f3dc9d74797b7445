"""A strict CPU stand-in for CuPy: arrays that live on a pretend device.

Like CuPy's, its arrays refuse to become NumPy arrays implicitly (``np.asarray(x)``,
``np.add(x, y)`` and mixed ``x + numpy_array`` raise TypeError), carry a device id, and reach
the host only through :func:`asnumpy` / ``.get()``; NumPy scalars and Python numbers mix freely,
as with CuPy. Underneath, every operation is NumPy's, so a run on the double computes exactly
what the same run computes on CPUs: any host/device mix-up fails loudly instead.

Where the workbench meets CuPy, the double is as strict as CuPy 14.2 and distributed 2026.7.1
(their sources are cited at each behaviour):

- ``DTRAIN_FAKE_GPU_MEMORY`` (bytes) makes any single allocation larger than it fail as
  ``DTRAIN_FAKE_GPU_MEMORY_ERROR`` says: ``pool`` (default; the memory pool's
  :class:`OutOfMemoryError`), ``cuda-runtime`` (:class:`CUDARuntimeError` 2, the allocator
  without the pool) or ``cublas`` (:class:`CUBLASError` 3, inside a matrix product).
- Arrays hold only the dtypes CuPy's do: bfloat16 as CuPy 14 with ml_dtypes, or refused as
  CuPy 13 refuses it with ``DTRAIN_FAKE_CUPY_BFLOAT16=0``.
- Work queued on the stream (the double's NCCL reductions) finishes in the background; any
  later device operation waits for it first, as kernels on one stream run in order.
- The GPUs: ``DTRAIN_FAKE_GPUS`` physical ones (default 2), narrowed by
  ``DTRAIN_FAKE_VISIBLE_DEVICES`` (``CUDA_VISIBLE_DEVICES``' syntax); this process computes on
  the first visible one, whose UUID :func:`device_identity` gives.
- Arrays pickle as a host copy rebuilt on the device (``cupy/_core/core.pyx`` ``__reduce__``),
  and distributed serializes them only as it serializes CuPy's: through serializers that
  import numba or rmm when first used, and fail with "Could not serialize object of type
  ndarray" without them (``distributed/protocol/__init__.py`` registers them lazily,
  ``distributed/protocol/cupy.py`` imports ``numba.cuda`` or ``rmm``).
"""

from __future__ import annotations

import builtins
import os
import sys
import threading
import types
import weakref

import numpy as np

float16, float32, float64, int64, int32, bool_ = (
    np.float16,
    np.float32,
    np.float64,
    np.int64,
    np.int32,
    np.bool_,
)
newaxis = None


class OutOfMemoryError(MemoryError):
    """CuPy's ``cupy.cuda.memory.OutOfMemoryError`` (``cupy/cuda/memory.pyx``): the memory
    pool's, with its message."""

    def __init__(self, size: int, total: int = 0, limit: int = 0) -> None:
        self._size, self._total, self._limit = size, total, limit
        super().__init__(
            f"Out of memory allocating {size:,} bytes (allocated so far: {total:,} bytes)."
        )

    def __reduce__(self):
        return type(self), (self._size, self._total, self._limit)


class CUDARuntimeError(RuntimeError):
    """``cupy_backends.cuda.api.runtime.CUDARuntimeError``: ``status`` and
    ``"<cudaError name>: <text>"``."""

    def __init__(self, status: int) -> None:
        self.status = status
        texts = {2: "cudaErrorMemoryAllocation: out of memory"}
        super().__init__(texts.get(status, f"cudaError {status}"))

    def __reduce__(self):
        return type(self), (self.status,)


class CUBLASError(RuntimeError):
    """``cupy_backends.cuda.libs.cublas.CUBLASError``: ``status``; the message is the status's
    name alone."""

    def __init__(self, status: int) -> None:
        self.status = status
        names = {3: "CUBLAS_STATUS_ALLOC_FAILED", 13: "CUBLAS_STATUS_EXECUTION_FAILED"}
        super().__init__(names[status])

    def __reduce__(self):
        return type(self), (self.status,)


class _StreamQueue:
    """Work queued on this process's stream that has not finished yet (NCCL reductions)."""

    def __init__(self) -> None:
        self._pending: list[threading.Event] = []
        self._lock = threading.Lock()

    def put(self, finished: threading.Event) -> None:
        with self._lock:
            self._pending.append(finished)

    def _snapshot(self) -> list[threading.Event]:
        with self._lock:
            self._pending = [event for event in self._pending if not event.is_set()]
            return list(self._pending)

    def drain(self) -> None:
        """Wait, with no deadline (as the device would), for everything queued so far."""
        if self._pending:
            for event in self._snapshot():
                event.wait()

    def marker(self):
        """A function saying whether what is queued now has finished (a recorded event)."""
        queued = self._snapshot()
        # builtins': this module's ``all`` is the array function, as CuPy's is.
        return lambda: builtins.all(event.is_set() for event in queued)


queue = _StreamQueue()


def physical_gpus() -> int:
    return int(os.environ.get("DTRAIN_FAKE_GPUS", "2"))


def visible_gpus() -> list[int]:
    """The physical GPUs this process sees, in order (``DTRAIN_FAKE_VISIBLE_DEVICES``, read as
    the CUDA runtime reads ``CUDA_VISIBLE_DEVICES``: it stops at the first entry that is not
    a GPU of this machine, and sees none where an entry repeats one)."""
    variable = os.environ.get("DTRAIN_FAKE_VISIBLE_DEVICES")
    if variable is None:
        return list(range(physical_gpus()))
    seen: list[int] = []
    for entry in variable.split(","):
        entry = entry.strip()
        if entry.isdigit() and int(entry) in seen:
            return []  # a list that repeats a GPU hides every GPU, as CUDA 13's runtime does
        if not entry.isdigit() or int(entry) >= physical_gpus():
            break
        seen.append(int(entry))
    return seen


def device_identity() -> str:
    """The UUID of the GPU this process computes on (the first visible one)."""
    visible = visible_gpus()
    if not visible:
        raise CUDARuntimeError(100)
    return f"GPU-00000000-0000-0000-0000-{visible[0]:012d}"


class Device:
    def __init__(self, id: int = 0) -> None:
        self.id = id

    def __repr__(self) -> str:
        return f"<CUDA Device {self.id} (CPU double)>"


class _Memory:
    def __init__(self, host: np.ndarray) -> None:
        self.ptr = host.ctypes.data


def _check_allocation(nbytes: int, inside: str = "allocation") -> None:
    limit = os.environ.get("DTRAIN_FAKE_GPU_MEMORY")
    if limit is None or nbytes <= int(limit):
        return
    kind = os.environ.get("DTRAIN_FAKE_GPU_MEMORY_ERROR", "pool")
    if kind == "cuda-runtime":
        raise CUDARuntimeError(2)
    if kind == "cublas":
        if inside == "matmul":
            raise CUBLASError(3)
        return  # only cuBLAS's own workspace runs out
    raise OutOfMemoryError(nbytes)


# The dtypes CuPy's arrays may hold (cupy/_core/_dtype.pyx ``all_type_chars``); bfloat16 joins
# them in CuPy 14 when ml_dtypes imports and NumPy is >= 2.1.2 (cupy/_core/_scalar.pyx
# ``_setup_type_dict``). CuPy 13 refuses it: ``ValueError: Unsupported dtype bfloat16``
# (cupy/_core/core.pyx ``_array_default``). ``DTRAIN_FAKE_CUPY_BFLOAT16=0`` plays CuPy 13.
_TYPE_CHARS = "?bhilqBHILQefdFD"


def _check_dtype(dtype: np.dtype) -> None:
    if dtype.char in _TYPE_CHARS:
        return
    if dtype.name == "bfloat16" and os.environ.get("DTRAIN_FAKE_CUPY_BFLOAT16", "1") != "0":
        return
    raise ValueError(f"Unsupported dtype {dtype}")


def _refuse_host(value, where: str):
    raise TypeError(
        f"Unsupported type {type(value)} in {where}: a NumPy array reached a device operation "
        "(implicit host/device conversion is not allowed; use asarray or asnumpy)"
    )


def _unwrap(value, where: str):
    """The NumPy value behind an operand: device arrays, scalars and nested sequences."""
    if isinstance(value, ndarray):
        queue.drain()
        return value._host
    if isinstance(value, np.ndarray):
        _refuse_host(value, where)
    if isinstance(value, (list, tuple)):
        return type(value)(_unwrap(item, where) for item in value)
    return value  # Python and NumPy scalars, dtypes, None, slices


def _wrap(result):
    if isinstance(result, np.ndarray):
        return ndarray(result)
    if isinstance(result, np.generic):
        return ndarray(np.asarray(result))  # CuPy reductions give 0-d arrays
    if isinstance(result, tuple):
        return tuple(_wrap(item) for item in result)
    if isinstance(result, list):
        return [_wrap(item) for item in result]
    return result


class ndarray:
    """A device array: a NumPy array nobody outside this module may see."""

    __array_priority__ = 1000
    __array_ufunc__ = None  # NumPy's ufuncs must not take it: np.add(x, y) raises TypeError

    def __init__(self, host: np.ndarray, device: int = 0) -> None:
        _check_dtype(host.dtype)
        _check_allocation(host.nbytes)
        self._host = host
        self.device = Device(device)
        if host.base is None:  # a view shares its base's allocation, as CuPy's views do
            _default_memory_pool._allocate(self, host.nbytes)

    # --- what CuPy refuses ----------------------------------------------------------------
    def __array__(self, *args, **kwargs):
        raise TypeError(
            "Implicit conversion to a NumPy array is not allowed. "
            "Please use `.get()` to construct a NumPy array explicitly."
        )

    def __array_function__(self, func, types, args, kwargs):
        raise TypeError(f"numpy.{func.__name__} was given a device array; use the array module")

    def __iter__(self):
        raise TypeError("iterating a device array element by element is not supported here")

    # --- attributes -----------------------------------------------------------------------------
    shape = property(lambda self: self._host.shape)
    dtype = property(lambda self: self._host.dtype)
    size = property(lambda self: self._host.size)
    ndim = property(lambda self: self._host.ndim)
    nbytes = property(lambda self: self._host.nbytes)
    itemsize = property(lambda self: self._host.itemsize)
    strides = property(lambda self: self._host.strides)
    flags = property(lambda self: self._host.flags)
    data = property(lambda self: _Memory(self._host))
    T = property(lambda self: ndarray(self._host.T))

    def _ready(self) -> np.ndarray:
        """The values once the work queued before this read has finished."""
        queue.drain()
        return self._host

    def __reduce__(self):
        # CuPy pickles a host copy and rebuilds it on the loading process's device.
        return array, (self.get(),)

    def __array_namespace__(self, api_version=None):
        return sys.modules[__name__]

    def __len__(self) -> int:
        return len(self._host)

    def __repr__(self) -> str:
        return f"device_array({self._ready()!r}, device={self.device.id})"

    def get(self) -> np.ndarray:
        return self._ready().copy()

    def item(self):
        return self._ready().item()

    def __float__(self) -> float:  # CuPy syncs and converts a size-1 array
        return float(self._ready())

    def __int__(self) -> int:
        return int(self._ready())

    def __bool__(self) -> bool:
        return bool(self._ready())

    # --- indexing ---------------------------------------------------------------------------------
    def __getitem__(self, index):
        return _wrap(self._ready()[_unwrap(index, "indexing")])

    def __setitem__(self, index, value) -> None:
        self._ready()[_unwrap(index, "indexing")] = _unwrap(value, "assignment")

    # --- methods ------------------------------------------------------------------------------
    def copy(self, order="C"):
        return ndarray(self._ready().copy(order=order))

    def astype(self, dtype, copy=True, **kwargs):
        return ndarray(self._ready().astype(dtype, copy=copy, **kwargs))

    def reshape(self, *shape, **kwargs):
        return ndarray(self._ready().reshape(*shape, **kwargs))

    def ravel(self):
        return ndarray(self._ready().ravel())

    def transpose(self, *axes):
        return ndarray(self._ready().transpose(*axes))

    def sum(self, *args, **kwargs):
        return _wrap(self._ready().sum(*args, **kwargs))

    def mean(self, *args, **kwargs):
        return _wrap(self._ready().mean(*args, **kwargs))

    def max(self, *args, **kwargs):
        return _wrap(self._ready().max(*args, **kwargs))

    def argmax(self, *args, **kwargs):
        return _wrap(self._ready().argmax(*args, **kwargs))


_PRODUCTS = {"__matmul__", "__rmatmul__", "matmul", "dot", "tensordot"}


def _product_checked(name: str, result, operands=()):
    """cuBLAS's own allocations fail inside a product (``DTRAIN_FAKE_GPU_MEMORY_ERROR``). A
    product of bfloat16 arrays is bfloat16, as CuPy's (cupy/_core/_routines_linalg.pyx gives
    the output the operands' dtype); ml_dtypes' NumPy product answers float32."""
    if name in _PRODUCTS and isinstance(result, np.ndarray):
        _check_allocation(result.nbytes, "matmul")
        arrays = [o for o in operands if isinstance(o, np.ndarray)]
        # builtins': this module's all and any are CuPy's.
        if arrays and builtins.all(a.dtype.name == "bfloat16" for a in arrays):
            if name != "tensordot" and builtins.any(a.ndim > 2 for a in arrays):
                # CuPy 14's batched product takes bfloat16 for an integer type and fails
                # (cupy/_core/_routines_linalg.pyx ``matmul``: dtype.char not in 'efdFD').
                raise TypeError("data type 'E' not understood")
            result = result.astype(arrays[0].dtype)
    return result


def _binary(name: str):
    def forward(self, other):
        host, operand = self._ready(), _unwrap(other, name)
        return _wrap(_product_checked(name, getattr(host, name)(operand), (host, operand)))

    return forward


def _unary(name: str):
    return lambda self: ndarray(getattr(self._ready(), name)())


for _name in [
    "add",
    "sub",
    "mul",
    "truediv",
    "floordiv",
    "pow",
    "matmul",
    "mod",
    "radd",
    "rsub",
    "rmul",
    "rtruediv",
    "rpow",
    "rmatmul",
    "gt",
    "ge",
    "lt",
    "le",
    "eq",
    "ne",
    "and",
    "or",
    "xor",
]:
    setattr(ndarray, f"__{_name}__", _binary(f"__{_name}__"))


def _in_place(name: str):
    def update(self, other):
        getattr(self._ready(), name)(_unwrap(other, name))
        return self

    return update


for _name in ("iadd", "isub", "imul", "itruediv", "ipow"):
    setattr(ndarray, f"__{_name}__", _in_place(f"__{_name}__"))
for _name in ("neg", "pos", "abs", "invert"):
    setattr(ndarray, f"__{_name}__", _unary(f"__{_name}__"))


# --- module functions -----------------------------------------------------------------------


def _function(numpy_function, name: str):
    def device_function(*args, **kwargs):
        out = kwargs.get("out")
        if out is not None:
            if not isinstance(out, ndarray):
                _refuse_host(out, f"{name}(out=)")
            kwargs["out"] = out._host
        arrays = _unwrap(args, name)
        result = numpy_function(*arrays, **_unwrap_kwargs(kwargs, name))
        return out if out is not None else _wrap(_product_checked(name, result, arrays))

    device_function.__name__ = name
    return device_function


def _unwrap_kwargs(kwargs: dict, where: str) -> dict:
    return {key: value if key == "out" else _unwrap(value, where) for key, value in kwargs.items()}


for _name in [
    "empty_like",
    "zeros_like",
    "ones_like",
    "concatenate",
    "stack",
    "sum",
    "mean",
    "max",
    "min",
    "argmax",
    "exp",
    "log",
    "sqrt",
    "tanh",
    "maximum",
    "minimum",
    "transpose",
    "broadcast_to",
    "split",
    "pad",
    "take_along_axis",
    "tensordot",
    "ascontiguousarray",
    "where",
    "matmul",
    "dot",
    "multiply",
    "subtract",
    "divide",
    "negative",
    "abs",
    "sign",
    "clip",
    "square",
    "isfinite",
    "all",
    "any",
    "allclose",
    "array_equal",
]:
    setattr(sys.modules[__name__], _name, _function(getattr(np, _name), _name))


def _creation(numpy_function, name: str):
    def create(*args, **kwargs):
        return ndarray(numpy_function(*args, **kwargs))

    create.__name__ = name
    return create


empty = _creation(np.empty, "empty")
zeros = _creation(np.zeros, "zeros")
ones = _creation(np.ones, "ones")
full = _creation(np.full, "full")
arange = _creation(np.arange, "arange")


class _Add:
    """``add`` with ``out=`` and ``add.at`` (CuPy's ufunc interface)."""

    __name__ = "add"

    def __call__(self, a, b, out=None):
        return _function(np.add, "add")(a, b, out=out)

    def at(self, target, indices, values) -> None:
        if not isinstance(target, ndarray):
            _refuse_host(target, "add.at")
        if target.dtype.name == "bfloat16":  # cupy/_core/_routines_indexing.pyx _scatter_op
            raise TypeError(
                "cupy.add.at only supports int32, int64, float16, float32, float64, uint32, "
                "uint64 as data type"
            )
        np.add.at(target._host, _unwrap(indices, "add.at"), _unwrap(values, "add.at"))


add = _Add()


def asarray(value, dtype=None, order=None):
    """A device array: ``value`` itself if it already is one (of ``dtype``), else a copy of
    the host value on the device (the host-to-device copy)."""
    if isinstance(value, ndarray):
        return value if dtype is None or value.dtype == dtype else value.astype(dtype)
    return ndarray(np.array(value, dtype=dtype, order=order or "K", copy=True))


def array(value, dtype=None, copy=True, order="K"):
    if isinstance(value, ndarray):
        return ndarray(np.array(value._host, dtype=dtype, copy=True, order=order))
    return ndarray(np.array(value, dtype=dtype, copy=True, order=order))


def asnumpy(value) -> np.ndarray:
    """The device-to-host copy."""
    return value.get() if isinstance(value, ndarray) else np.asarray(value)


def get_array_module(*arrays):
    return sys.modules[__name__] if any(isinstance(a, ndarray) for a in arrays) else np


def _as_strided(x, shape=None, strides=None, **kwargs):
    if not isinstance(x, ndarray):
        _refuse_host(x, "as_strided")
    return ndarray(np.lib.stride_tricks.as_strided(x._host, shape=shape, strides=strides, **kwargs))


lib = types.SimpleNamespace(stride_tricks=types.SimpleNamespace(as_strided=_as_strided))


# --- the memory pool -------------------------------------------------------------------------
# ``cupy/cuda/memory.pyx``: every allocation is rounded up to 512 bytes (``_allocation_unit_size``)
# and comes from the default pool, which keeps a freed block cached for the next allocation
# (``total_bytes`` = ``used_bytes`` + ``free_bytes``) until ``free_all_blocks``.
_ALLOCATION_UNIT = 512


class MemoryPool:
    """``cupy.cuda.MemoryPool``'s figures over the double's allocations: a freed block is
    cached and reused by a later allocation no larger than it (the real pool also splits and
    merges blocks; the double keeps whole ones). This module's ``sum`` and ``min`` are the
    device functions, hence ``builtins``."""

    def __init__(self, allocator=None) -> None:
        # Re-entrant: a collected array's finalizer may free its block inside an allocation.
        self._lock = threading.RLock()
        self._used = 0
        self._free: list[int] = []  # cached block sizes
        self._limit = 0

    def _allocate(self, owner: object, nbytes: int) -> None:
        size = -(-nbytes // _ALLOCATION_UNIT) * _ALLOCATION_UNIT
        if size == 0:
            return
        with self._lock:
            fitting = [block for block in self._free if block >= size]
            if fitting:
                size = builtins.min(fitting)
                self._free.remove(size)
            elif self._limit and self._used + builtins.sum(self._free) + size > self._limit:
                raise OutOfMemoryError(size, self._used + builtins.sum(self._free), self._limit)
            self._used += size
        weakref.finalize(owner, self._release, size)

    def _release(self, size: int) -> None:
        with self._lock:
            self._used -= size
            self._free.append(size)

    def free_all_blocks(self, stream=None) -> None:
        with self._lock:
            self._free = []

    def n_free_blocks(self) -> int:
        with self._lock:
            return len(self._free)

    def used_bytes(self) -> int:
        with self._lock:
            return self._used

    def free_bytes(self) -> int:
        with self._lock:
            return builtins.sum(self._free)

    def total_bytes(self) -> int:
        with self._lock:
            return self._used + builtins.sum(self._free)

    def set_limit(self, size=None, fraction=None) -> None:
        if size is not None and fraction is not None:
            raise ValueError("size and fraction cannot be specified at the same time")
        if fraction is not None:
            raise NotImplementedError("the CPU double has no device memory to take a fraction of")
        self._limit = int(size or 0)

    def get_limit(self) -> int:
        return self._limit


_default_memory_pool = MemoryPool()


def get_default_memory_pool() -> MemoryPool:
    """``cupy.get_default_memory_pool()``: the pool every device array comes from."""
    return _default_memory_pool


# --- how distributed serializes these arrays ------------------------------------------------
# CuPy's arrays belong to the top-level module ``cupy``, for which distributed registers its
# serializers lazily; the double's belong to ``cupy_double`` so that the same happens to them.
ndarray.__module__ = "cupy_double._core.core"


def _register_distributed_serializers() -> None:
    """What importing ``distributed/protocol/cupy.py`` does: it first imports the module that
    rebuilds device buffers on the receiving side (``rmm`` with ``numba``, else
    ``numba.cuda``), so without numba the import, and every serialization that needs it,
    fails; ``Dispatch`` (``dask/utils.py``) re-raises, and ``serialize`` stops there."""
    try:
        import numba.cuda
        import rmm  # noqa: F401
    except ImportError:
        import numba.cuda  # noqa: F401
    from distributed.protocol.cuda import cuda_deserialize, cuda_serialize
    from distributed.protocol.serialize import dask_deserialize, dask_serialize

    def dumps(x):
        host = np.ascontiguousarray(x.get())
        return {"shape": host.shape, "dtype": host.dtype.str}, [memoryview(host).cast("B")]

    def loads(header, frames):
        host = np.frombuffer(frames[0], dtype=np.dtype(header["dtype"]))
        return asarray(host.reshape(header["shape"]))

    for serializer in (cuda_serialize, dask_serialize):
        serializer.register(ndarray)(dumps)
    for deserializer in (cuda_deserialize, dask_deserialize):
        deserializer.register(ndarray)(loads)


def _register_lazily() -> None:
    try:
        from distributed.protocol.cuda import cuda_deserialize, cuda_serialize
        from distributed.protocol.serialize import dask_deserialize, dask_serialize
    except ImportError:
        return
    for dispatch in (cuda_serialize, cuda_deserialize, dask_serialize, dask_deserialize):
        dispatch.register_lazy("cupy_double", _register_distributed_serializers)


_register_lazily()
