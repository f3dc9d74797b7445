"""``central-storage``: TF's ``CentralStorageStrategy`` on Dask workers.

One device (rank 0, standing in for the host CPU) keeps the only authoritative copy of the
variables. Every device computes gradients on its slice of the batch; the gradients are reduced
onto the storage device, which applies the update and sends the new variable values back. The
traffic pattern is the parameter-server one (everything through one device), without sharding.
"""

from __future__ import annotations

from workbench.parallel.data_parallel import DataParallelStrategy


class CentralStorageStrategy(DataParallelStrategy):
    name = "central-storage"
    central_storage = True
