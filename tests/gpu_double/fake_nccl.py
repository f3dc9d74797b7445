"""A CPU stand-in for ``cupy.cuda.nccl``, as strict as CuPy 14 and NCCL where the workbench
meets them; its communicators really sum device buffers across processes, through files in a
directory named by the unique id.

What it follows (CuPy ``cupy_backends/cuda/libs/nccl.pyx`` and ``cupy/cuda/nccl.py`` at
v14.2.0 and v13.6.0; NCCL ``src/init.cc`` at v2.27.7-1):

- ``import`` never fails: without NCCL (``DTRAIN_FAKE_NCCL=0`` here, a missing ``libnccl``
  there) ``available`` is False and no other name exists, so a call raises AttributeError.
- ``get_unique_id()`` returns 128 ``bytes`` (CuPy 14) or, with ``DTRAIN_FAKE_CUPY_MAJOR=13``,
  a tuple of 128 signed ints (CuPy 13's C ``char``). ``NcclCommunicator(ndev, commId, rank)``
  takes exactly that type: CuPy 14 refuses a tuple with Cython's TypeError and a wrong length
  with ``ValueError("commId length N != 128.")``; CuPy 13 refuses bytes.
- Joining blocks until every rank has joined, without a deadline (CuPy 14 offers no
  non-blocking initialisation), and two ranks on one GPU fail with NCCL's ``ncclInvalidUsage``
  ("Duplicate GPU detected"), as :class:`NcclError` with status 5.
- ``allReduce`` is queued on the stream and returns at once; the sum lands when every rank's
  contribution has arrived, however long that takes (a dead peer: never). Later device work
  waits for it (the double's stream order, ``fake_cupy.queue``), so does ``synchronize``;
  ``abort()`` ends a communicator and any reduction it still has queued.

Each rank writes its buffer for call k as ``k-<rank>.npy`` (renamed into place, so a file
that exists is complete); the reduction sums every rank's file in rank order (so every rank
gets the same bytes) and removes its own file of call k-1, which every rank has read by then.
``DTRAIN_FAKE_NCCL_SECONDS`` adds that many seconds to each reduction, as a slow fabric would.
``DTRAIN_FAKE_NCCL_STALL`` makes one rank hang as a stuck GPU or a wedged process would:
``join:RANK`` (it never joins the communicator) or ``allreduce:RANK:CALL`` (from its CALL-th
reduction on it contributes nothing, and its own call never returns); with
``DTRAIN_FAKE_NCCL_STALL_ONCE=PATH`` only the first rank to get there hangs (it creates PATH).
"""

from __future__ import annotations

import ctypes
import os
import socket
import tempfile
import threading
import time
import uuid
from pathlib import Path

import numpy as np

from tests.gpu_double import fake_cupy

UNIQUE_ID_BYTES = 128
_POLL_SECONDS = 0.0005
_ERROR_NAMES = {
    1: "NCCL_ERROR_UNHANDLED_CUDA_ERROR",
    2: "NCCL_ERROR_SYSTEM_ERROR",
    3: "NCCL_ERROR_INTERNAL_ERROR",
    4: "NCCL_ERROR_INVALID_ARGUMENT",
    5: "NCCL_ERROR_INVALID_USAGE",
    6: "NCCL_ERROR_REMOTE_ERROR",
}
_ERROR_TEXTS = {
    1: "unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
    2: "unhandled system error (run with NCCL_DEBUG=INFO for details)",
    3: "internal error - please report this issue to the NCCL developers",
    4: "invalid argument (run with NCCL_DEBUG=WARN for details)",
    5: "invalid usage (run with NCCL_DEBUG=WARN for details)",
    6: "remote process exited or there was a network error",
}


class NcclError(RuntimeError):
    """CuPy's ``NcclError``: ``status`` and ``"<NAME>: <NCCL's text>"``."""

    def __init__(self, status: int) -> None:
        self.status = status
        super().__init__(f"{_ERROR_NAMES[status]}: {_ERROR_TEXTS[status]}")

    def __reduce__(self):
        return type(self), (self.status,)


def _cupy_major() -> int:
    return int(os.environ.get("DTRAIN_FAKE_CUPY_MAJOR", "14"))


def _get_unique_id() -> bytes | tuple[int, ...]:
    root = os.environ.get("DTRAIN_FAKE_NCCL_DIR", tempfile.gettempdir())
    directory = os.path.join(root, f"nccl-{uuid.uuid4().hex[:12]}")
    os.makedirs(directory)
    encoded = directory.encode()
    if len(encoded) > UNIQUE_ID_BYTES:
        raise ValueError(f"DTRAIN_FAKE_NCCL_DIR is too long for a unique id: {root}")
    raw = encoded + bytes(UNIQUE_ID_BYTES - len(encoded))
    if _cupy_major() >= 14:
        return raw
    return tuple(int(v) for v in np.frombuffer(raw, dtype=np.int8))  # C char: signed


def _directory_of(comm_id: bytes | tuple[int, ...]) -> str:
    raw = comm_id if isinstance(comm_id, bytes) else np.array(comm_id, np.int8).tobytes()
    return raw.rstrip(b"\0").decode()


def _check_id(comm_id) -> None:
    """CuPy 14's ``bytes commId`` (CuPy 13's ``tuple commId``), as Cython checks it."""
    expected = bytes if _cupy_major() >= 14 else tuple
    if comm_id is not None and not isinstance(comm_id, expected):
        raise TypeError(
            f"Argument 'commId' has incorrect type (expected {expected.__name__}, "
            f"got {type(comm_id).__name__})"
        )
    if expected is bytes and len(comm_id) != UNIQUE_ID_BYTES:
        raise ValueError(f"commId length {len(comm_id)} != {UNIQUE_ID_BYTES}.")
    if expected is tuple:
        assert len(comm_id) == UNIQUE_ID_BYTES  # CuPy 13 asserts, with no message


def _buffer(pointer: int, count: int, dtype) -> np.ndarray:
    nbytes = count * np.dtype(dtype).itemsize
    raw = (ctypes.c_char * nbytes).from_address(pointer)
    return np.frombuffer(raw, dtype=dtype, count=count)


class _NcclCommunicator:
    def __init__(self, ndev: int, commId, rank: int, config=None) -> None:
        if config is not None and _cupy_major() < 14:
            raise TypeError("__init__() takes exactly 3 positional arguments (4 given)")
        _check_id(commId)
        self._size, self._rank = int(ndev), int(rank)
        self.directory = _directory_of(commId)
        self.calls = 0
        self.aborted = threading.Event()
        self._join()

    def _stalls(self, where: str, call: int = 0) -> bool:
        """Whether this rank hangs here (``DTRAIN_FAKE_NCCL_STALL``)."""
        kind, _, rest = os.environ.get("DTRAIN_FAKE_NCCL_STALL", "").partition(":")
        rank, _, first_call = rest.partition(":")
        if kind != where or int(rank or -1) != self._rank or call < int(first_call or 0):
            return False
        once = os.environ.get("DTRAIN_FAKE_NCCL_STALL_ONCE")
        if once is None:
            return True
        try:
            os.close(os.open(once, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        except FileExistsError:
            return False  # another rank (or an earlier attempt) hung already
        return True

    def _hang(self) -> None:
        """Block for good, as a rank stuck on its GPU does (its process is killed, not
        woken: the workers' nannies end it)."""
        while True:
            time.sleep(1.0)

    def _join(self) -> None:
        """ncclCommInitRank: announce this rank's GPU, wait (with no deadline) for every
        rank, then refuse two ranks on one GPU of one host."""
        if self._stalls("join"):
            self._hang()
        identity = f"{socket.gethostname()}/{fake_cupy.device_identity()}"
        mine = os.path.join(self.directory, f"join-{self._rank}")
        with open(f"{mine}.partial", "w") as handle:
            handle.write(identity)
        os.replace(f"{mine}.partial", mine)
        paths = [os.path.join(self.directory, f"join-{r}") for r in range(self._size)]
        while not all(os.path.exists(path) for path in paths):
            time.sleep(_POLL_SECONDS)
        identities = [Path(path).read_text() for path in paths]
        if len(set(identities)) < len(identities):
            raise NcclError(5)  # NCCL: "Duplicate GPU detected : rank i and rank j both on ..."

    def allReduce(self, sendbuf, recvbuf, count, datatype, op, stream) -> None:
        if self.aborted.is_set():
            raise NcclError(4)
        if op != _API["NCCL_SUM"]:
            raise ValueError("the CPU double of NCCL only sums")
        dtype = _DTYPES[datatype]
        call, self.calls = self.calls, self.calls + 1
        if self._stalls("allreduce", call):
            self._hang()
        mine = os.path.join(self.directory, f"{call}-{self._rank}.npy")
        staging = f"{mine}.partial.npy"
        np.save(staging, _buffer(sendbuf, count, dtype))  # the buffer as queued work sees it
        os.replace(staging, mine)
        finished = threading.Event()
        fake_cupy.queue.put(finished)
        threading.Thread(
            target=self._reduce, args=(call, recvbuf, count, dtype, finished), daemon=True
        ).start()

    def _reduce(self, call: int, recvbuf, count: int, dtype, finished: threading.Event) -> None:
        try:
            paths = [os.path.join(self.directory, f"{call}-{r}.npy") for r in range(self._size)]
            while not all(os.path.exists(path) for path in paths):
                if self.aborted.wait(_POLL_SECONDS):
                    return  # ncclCommAbort: the kernel ends, the buffer is left as it was
            time.sleep(float(os.environ.get("DTRAIN_FAKE_NCCL_SECONDS", "0")))
            total = np.load(paths[0])
            for path in paths[1:]:
                total += np.load(path)
            _buffer(recvbuf, count, dtype)[...] = total
            previous = os.path.join(self.directory, f"{call - 1}-{self._rank}.npy")
            if call and os.path.exists(previous):
                os.remove(previous)
        finally:
            finished.set()

    def check_async_error(self) -> None:
        """NCCL reports no error for a peer that is merely silent: it waits."""

    def abort(self) -> None:
        self.aborted.set()

    def destroy(self) -> None:
        self.aborted.set()

    def rank_id(self) -> int:
        return self._rank

    def size(self) -> int:
        return self._size


_API = {
    "NCCL_FLOAT16": 6,
    "NCCL_FLOAT32": 7,
    "NCCL_FLOAT64": 8,
    "NCCL_SUM": 0,
    "NcclError": NcclError,
    "NcclCommunicator": _NcclCommunicator,
    "get_unique_id": _get_unique_id,
    "get_version": lambda: 22707,
}
_DTYPES = {6: np.float16, 7: np.float32, 8: np.float64}


def __getattr__(name: str):
    """``available`` and, only when NCCL "loaded", the rest of the module's names."""
    loaded = os.environ.get("DTRAIN_FAKE_NCCL", "1") != "0"
    if name == "available":
        return loaded
    if loaded and name in _API:
        return _API[name]
    raise AttributeError(f"module 'cupy.cuda.nccl' has no attribute {name!r}")
