"""``central-storage``: TF's ``CentralStorageStrategy`` on Dask workers.

One device (rank 0, standing in for the host CPU) keeps the only authoritative copy of the
variables. Every device computes gradients on its slice of the batch; the gradients are reduced
onto the storage device, which applies the update and sends the new variable values back. The
traffic pattern is the parameter-server one (everything through one device), without sharding.
"""

from __future__ import annotations

from workbench.strategies.data_parallel import DataParallel
from workbench.strategies.options import BUCKET_MB, REPLICATION


class CentralStorage(DataParallel):
    name = "central-storage"
    description = "variables on one device, compute replicated, one central update"
    options = (BUCKET_MB, REPLICATION)
    central_storage = True
