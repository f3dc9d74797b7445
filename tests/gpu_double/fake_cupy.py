"""A strict CPU stand-in for CuPy: arrays that live on a pretend device.

Like CuPy's, its arrays refuse to become NumPy arrays implicitly (``np.asarray(x)``,
``np.add(x, y)`` and mixed ``x + numpy_array`` raise TypeError), carry a device id, and reach
the host only through :func:`asnumpy` / ``.get()``; NumPy scalars and Python numbers mix freely,
as with CuPy. Underneath, every operation is NumPy's, so a run on the double computes exactly
what the same run computes on CPUs: any host/device mix-up fails loudly instead.

``DTRAIN_FAKE_GPU_MEMORY`` (bytes) makes any single allocation larger than it raise
:class:`OutOfMemoryError` with CuPy's message, to test out-of-memory handling.
"""

from __future__ import annotations

import os
import sys
import types

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
    """CuPy's ``cupy.cuda.memory.OutOfMemoryError``, with its message."""

    def __init__(self, size: int, total: int = 0) -> None:
        super().__init__(
            f"Out of memory allocating {size:,} bytes (allocated so far: {total:,} bytes)."
        )


class Device:
    def __init__(self, id: int = 0) -> None:
        self.id = id

    def __repr__(self) -> str:
        return f"<CUDA Device {self.id} (CPU double)>"


class _Memory:
    def __init__(self, host: np.ndarray) -> None:
        self.ptr = host.ctypes.data


def _check_allocation(nbytes: int) -> None:
    limit = os.environ.get("DTRAIN_FAKE_GPU_MEMORY")
    if limit is not None and nbytes > int(limit):
        raise OutOfMemoryError(nbytes)


def _refuse_host(value, where: str):
    raise TypeError(
        f"Unsupported type {type(value)} in {where}: a NumPy array reached a device operation "
        "(implicit host/device conversion is not allowed; use asarray or asnumpy)"
    )


def _unwrap(value, where: str):
    """The NumPy value behind an operand: device arrays, scalars and nested sequences."""
    if isinstance(value, ndarray):
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
        _check_allocation(host.nbytes)
        self._host = host
        self.device = Device(device)

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

    def __array_namespace__(self, api_version=None):
        return sys.modules[__name__]

    def __len__(self) -> int:
        return len(self._host)

    def __repr__(self) -> str:
        return f"device_array({self._host!r}, device={self.device.id})"

    def get(self) -> np.ndarray:
        return self._host.copy()

    def item(self):
        return self._host.item()

    def __float__(self) -> float:  # CuPy syncs and converts a size-1 array
        return float(self._host)

    def __int__(self) -> int:
        return int(self._host)

    def __bool__(self) -> bool:
        return bool(self._host)

    # --- indexing ---------------------------------------------------------------------------------
    def __getitem__(self, index):
        return _wrap(self._host[_unwrap(index, "indexing")])

    def __setitem__(self, index, value) -> None:
        self._host[_unwrap(index, "indexing")] = _unwrap(value, "assignment")

    # --- methods ------------------------------------------------------------------------------
    def copy(self, order="C"):
        return ndarray(self._host.copy(order=order))

    def astype(self, dtype, copy=True, **kwargs):
        return ndarray(self._host.astype(dtype, copy=copy, **kwargs))

    def reshape(self, *shape, **kwargs):
        return ndarray(self._host.reshape(*shape, **kwargs))

    def ravel(self):
        return ndarray(self._host.ravel())

    def transpose(self, *axes):
        return ndarray(self._host.transpose(*axes))

    def sum(self, *args, **kwargs):
        return _wrap(self._host.sum(*args, **kwargs))

    def mean(self, *args, **kwargs):
        return _wrap(self._host.mean(*args, **kwargs))

    def max(self, *args, **kwargs):
        return _wrap(self._host.max(*args, **kwargs))

    def argmax(self, *args, **kwargs):
        return _wrap(self._host.argmax(*args, **kwargs))


def _binary(name: str):
    def forward(self, other):
        return _wrap(getattr(self._host, name)(_unwrap(other, name)))

    return forward


def _unary(name: str):
    return lambda self: ndarray(getattr(self._host, name)())


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
        getattr(self._host, name)(_unwrap(other, name))
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
        result = numpy_function(*_unwrap(args, name), **_unwrap_kwargs(kwargs, name))
        return out if out is not None else _wrap(result)

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
