"""NCCL all-reduce on device buffers (``--allreduce nccl``; TF's default for MirroredStrategy on
GPUs), through ``cupy.cuda.nccl``.

The ranks build one communicator the first time they reduce: rank 0 asks NCCL for a unique id
and sends it to every peer over the run's own transport (a few hundred bytes, once), then every
rank joins. Each reduction is queued on the device's current stream, in place, and summed by
NCCL's own ring or tree inside the GPUs' fabric; no byte passes through the host. NCCL's result
is identical on every rank, as an all-reduce must be.

Traffic is counted as NCCL's ring moves it, 2(N-1)/N of the buffer each way per rank (NCCL does
not report what it sent), so the events compare with the workbench's own ring.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from workbench.parallel.collectives.ring import ring_bytes_per_rank
from workbench.runtime.devices import to_host
from workbench.runtime.gpu_runtime import GpuRuntime
from workbench.runtime.transport import Transport

_DATATYPES = {"float16": "NCCL_FLOAT16", "float32": "NCCL_FLOAT32", "float64": "NCCL_FLOAT64"}


class NcclAllReduce:
    """Sums device buffers over the ranks of ``transport`` with NCCL."""

    path = "device:nccl"

    def __init__(self, transport: Transport, runtime: GpuRuntime) -> None:
        if runtime.nccl is None:
            raise RuntimeError("--allreduce nccl: this GPU runtime has no NCCL")
        self.transport, self.runtime, self.nccl = transport, runtime, runtime.nccl
        self.communicator: Any = None

    def _connect(self) -> None:
        transport = self.transport
        if transport.rank == 0:
            unique_id = np.asarray(self.nccl.get_unique_id(), dtype=np.int64)
            for peer in range(1, transport.size):
                transport.send(peer, "nccl/unique-id", unique_id)
        else:
            unique_id = to_host(transport.recv(0, "nccl/unique-id"))
        identifier = tuple(int(value) for value in unique_id)
        self.communicator = self.nccl.NcclCommunicator(transport.size, identifier, transport.rank)

    def __call__(self, array: Any) -> Any:
        """Sum ``array`` (a contiguous device buffer) over the ranks, in place; returns it."""
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
        moved = int(ring_bytes_per_rank(array.nbytes, self.transport.size))
        self.transport.bytes_sent += moved
        self.transport.bytes_received += moved
        return array

    def close(self) -> None:
        if self.communicator is not None:
            self.communicator.destroy()
            self.communicator = None
