"""NCCL all-reduce on device buffers (``--allreduce nccl``; TF's default for MirroredStrategy on
GPUs), through ``cupy.cuda.nccl``.

The ranks build one communicator the first time they reduce: rank 0 asks NCCL for a unique id
and sends it to every peer over the run's own transport (a few hundred bytes, once), every
peer answers that it is joining, then every rank joins. The id travels as the installed CuPy
defines it: 128 ``bytes`` since CuPy 14, a tuple of 128 signed ints before (its dtype on the
wire says which). Each reduction is queued on the device's current stream, in place, and
summed by NCCL's own ring or tree inside the GPUs' fabric; no byte passes through the host.
NCCL's result is identical on every rank, as an all-reduce must be.

NCCL never gives up on a peer: its initialisation and a collective whose peer died block
forever. So every wait here has the run's stall timeout: the id and the answers go through the
transport, whose receive names a peer that never came; the communicator is built in a thread
that is given up on after the timeout (CuPy offers no non-blocking initialisation); and a
reduction is polled on a CUDA event until it finishes, or the communicator is aborted (which
ends the kernel waiting for the dead peer) and the step fails with a stall error. The poll
also makes the reduction's time its own: the all-reduce returns when NCCL has finished, not
when it was queued.

Traffic is counted as NCCL's ring moves it, 2(N-1)/N of the buffer each way per rank (NCCL does
not report what it sent), so the events compare with the workbench's own ring.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

from workbench.parallel.collectives.ring import ring_bytes_per_rank
from workbench.runtime.devices import to_host
from workbench.runtime.gpu_runtime import GpuRuntime
from workbench.runtime.transport import StallError, Transport

_DATATYPES = {"float16": "NCCL_FLOAT16", "float32": "NCCL_FLOAT32", "float64": "NCCL_FLOAT64"}
# An event query is cheap; the longest pause bounds what polling adds to a reduction's time.
_FIRST_POLL_SECONDS, _LONGEST_POLL_SECONDS = 20e-6, 100e-6


def encode_unique_id(unique_id: bytes | tuple[int, ...]) -> np.ndarray:
    """The id as an array for the transport: uint8 for CuPy 14's bytes, int64 for CuPy 13's
    tuple.

    Examples
    --------
    >>> encode_unique_id(b"ab").dtype, encode_unique_id((97, -98)).dtype
    (dtype('uint8'), dtype('int64'))
    """
    if isinstance(unique_id, bytes):
        return np.frombuffer(unique_id, dtype=np.uint8).copy()
    return np.asarray(unique_id, dtype=np.int64)


def decode_unique_id(array: np.ndarray) -> bytes | tuple[int, ...]:
    """The id as the CuPy that made it passes it to ``NcclCommunicator``.

    Examples
    --------
    >>> decode_unique_id(encode_unique_id(b"ab")), decode_unique_id(encode_unique_id((97, -98)))
    (b'ab', (97, -98))
    """
    if array.dtype == np.uint8:
        return array.tobytes()
    return tuple(int(value) for value in array)


class NcclAllReduce:
    """Sums device buffers over the ranks of ``transport`` with NCCL, each wait bounded by
    ``stall_timeout`` seconds."""

    path = "device:nccl"

    def __init__(self, transport: Transport, runtime: GpuRuntime, stall_timeout: float) -> None:
        if not runtime.nccl_available:
            raise RuntimeError("--allreduce nccl: NCCL did not load on this worker")
        self.transport, self.runtime, self.nccl = transport, runtime, runtime.nccl
        self.stall_timeout = stall_timeout
        self.communicator: Any = None

    def _names(self) -> tuple[str, str]:
        """(this device, its peers) as messages name them."""
        names = list(getattr(self.transport, "device_names", []))
        if not names:
            names = [f"rank {rank}" for rank in range(self.transport.size)]
        me = names[self.transport.rank]
        return me, ", ".join(name for name in names if name != me)

    def _step(self) -> Any:
        return getattr(self.transport, "step", None)

    def _connect(self) -> None:
        transport = self.transport
        if transport.rank == 0:
            unique_id = self.nccl.get_unique_id()
            for peer in range(1, transport.size):
                transport.send(peer, "nccl/unique-id", encode_unique_id(unique_id))
            for peer in range(1, transport.size):  # a peer that never joins is named here
                transport.recv(peer, "nccl/joining")
        else:
            unique_id = decode_unique_id(to_host(transport.recv(0, "nccl/unique-id")))
            transport.send(0, "nccl/joining", np.zeros(1, dtype=np.uint8))
        self.communicator = self._join(unique_id)

    def _join(self, unique_id: bytes | tuple[int, ...]) -> Any:
        """``NcclCommunicator(size, id, rank)``, given up on after the stall timeout (it
        blocks until every rank has joined; the thread left behind ends with the worker)."""
        built: dict[str, Any] = {}

        def build() -> None:
            try:
                built["communicator"] = self.nccl.NcclCommunicator(
                    self.transport.size, unique_id, self.transport.rank
                )
            except BaseException as error:  # handed to the waiting thread
                built["error"] = error

        joining = threading.Thread(target=build, name="nccl-join", daemon=True)
        joining.start()
        joining.join(self.stall_timeout)
        if "error" in built:
            raise built["error"]
        if "communicator" not in built:
            me, peers = self._names()
            raise StallError(
                f"step {self._step()}: {me} waited {self.stall_timeout:g}s for NCCL's "
                f"communicator with {peers}: a peer stalled or died while joining"
            )
        return built["communicator"]

    def __call__(self, array: Any) -> Any:
        """Sum ``array`` (a contiguous device buffer) over the ranks, in place; returns it once
        NCCL has finished."""
        if self.transport.size == 1:
            return array
        if self.communicator is None:
            self._connect()
        datatype = getattr(self.nccl, _DATATYPES[str(array.dtype)])
        pointer = array.data.ptr
        self.communicator.allReduce(
            pointer,
            pointer,
            array.size,
            datatype,
            self.nccl.NCCL_SUM,
            self.runtime.stream_pointer(),
        )
        self._wait(self.runtime.mark_queued_work())
        moved = int(ring_bytes_per_rank(array.nbytes, self.transport.size))
        self.transport.count_traffic(moved, moved)
        return array

    def _wait(self, finished: Any) -> None:
        """Poll until the queued reduction has finished; past the stall timeout abort the
        communicator (ending the kernel that waits for a dead peer) and fail the step."""
        deadline = time.monotonic() + self.stall_timeout
        pause = _FIRST_POLL_SECONDS
        while not finished():
            self.communicator.check_async_error()  # a peer NCCL saw fail: NcclError
            if time.monotonic() > deadline:
                self.communicator.abort()
                self.communicator = None
                me, peers = self._names()
                raise StallError(
                    f"step {self._step()}: {me}'s NCCL all-reduce did not finish within "
                    f"{self.stall_timeout:g}s: one of {peers} stalled or died"
                )
            time.sleep(pause)
            pause = min(pause * 2, _LONGEST_POLL_SECONDS)

    def close(self) -> None:
        if self.communicator is not None:
            self.communicator.destroy()
            self.communicator = None
