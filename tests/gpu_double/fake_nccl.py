"""A CPU stand-in for ``cupy.cuda.nccl``: communicators whose ``allReduce`` really sums device
buffers across processes, through files in a directory named by the unique id.

Each rank writes its buffer for call k as ``k-<rank>.npy`` (renamed into place, so a file that
exists is complete), waits for every rank's file, sums them in rank order into the receive
buffer (so every rank gets the same bytes), and removes its own file of call k-1, which every
rank has read by then (a rank writes call k only after finishing call k-1). Buffers are reached
through their pointers, as NCCL reaches device memory.
"""

from __future__ import annotations

import ctypes
import os
import tempfile
import time
import uuid

import numpy as np

NCCL_FLOAT16, NCCL_FLOAT32, NCCL_FLOAT64 = 6, 7, 8
NCCL_SUM = 0
_DTYPES = {NCCL_FLOAT16: np.float16, NCCL_FLOAT32: np.float32, NCCL_FLOAT64: np.float64}
_ID_LENGTH = 128
TIMEOUT_SECONDS = 60.0


def get_unique_id() -> tuple[int, ...]:
    root = os.environ.get("DTRAIN_FAKE_NCCL_DIR", tempfile.gettempdir())
    directory = os.path.join(root, f"nccl-{uuid.uuid4().hex[:12]}")
    os.makedirs(directory)
    encoded = list(directory.encode())
    if len(encoded) > _ID_LENGTH:
        raise ValueError(f"DTRAIN_FAKE_NCCL_DIR is too long for a unique id: {root}")
    return tuple(encoded + [0] * (_ID_LENGTH - len(encoded)))


def _buffer(pointer: int, count: int, dtype) -> np.ndarray:
    nbytes = count * np.dtype(dtype).itemsize
    raw = (ctypes.c_char * nbytes).from_address(pointer)
    return np.frombuffer(raw, dtype=dtype, count=count)


class NcclCommunicator:
    def __init__(self, ndev: int, comm_id: tuple[int, ...], rank: int) -> None:
        self.size, self.rank_id = ndev, rank
        self.directory = bytes(v for v in comm_id if v).decode()
        self.calls = 0

    def allReduce(self, sendbuf, recvbuf, count, datatype, op, stream) -> None:
        if op != NCCL_SUM:
            raise ValueError("the CPU double of NCCL only sums")
        dtype = _DTYPES[datatype]
        call, self.calls = self.calls, self.calls + 1
        mine = os.path.join(self.directory, f"{call}-{self.rank_id}.npy")
        staging = f"{mine}.partial.npy"
        np.save(staging, _buffer(sendbuf, count, dtype))
        os.replace(staging, mine)
        paths = [os.path.join(self.directory, f"{call}-{r}.npy") for r in range(self.size)]
        deadline = time.monotonic() + TIMEOUT_SECONDS
        while not all(os.path.exists(path) for path in paths):
            if time.monotonic() > deadline:
                raise TimeoutError(f"NCCL double: rank {self.rank_id} waited for call {call}")
            time.sleep(0.0005)
        total = np.load(paths[0])
        for path in paths[1:]:
            total += np.load(path)
        _buffer(recvbuf, count, dtype)[...] = total
        previous = os.path.join(self.directory, f"{call - 1}-{self.rank_id}.npy")
        if call and os.path.exists(previous):
            os.remove(previous)

    def destroy(self) -> None:
        pass
