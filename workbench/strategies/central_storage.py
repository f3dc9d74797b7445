"""``central-storage``: TF's ``CentralStorageStrategy`` on Dask workers.

One device (rank 0, standing in for the host CPU) keeps the only authoritative copy of the
variables. Every device computes gradients on its slice of the batch; the gradients are reduced
onto the storage device, which applies the update and sends the new variable values back. The
traffic pattern is the parameter-server one (everything through one device), without sharding.
With ``--compression`` each replica encodes its gradients for that push (fp16/bf16 with loss
scaling, top-k or PowerSGD with error feedback); the storage device decodes them and sums them
in rank order.
"""

from __future__ import annotations

from workbench.config import RunConfig
from workbench.parallel.collectives.compression import compression_summary
from workbench.strategies.data_parallel import DataParallel
from workbench.strategies.options import (
    BUCKET_MB,
    COMPRESSION,
    REPLICATION,
    CentralStorageOptions,
    ReplicationName,
)


class CentralStorage(DataParallel):
    name = "central-storage"
    description = "variables on one device, compute replicated, one central update"
    options = (BUCKET_MB, COMPRESSION, REPLICATION)
    options_type = CentralStorageOptions
    planning = "workbench.planner.strategy_planning:CENTRAL_STORAGE"
    central_storage = True

    def replication(self, config: RunConfig) -> ReplicationName:
        return config.options_of(CentralStorageOptions).replication

    def summary_fields(self, config: RunConfig, log, devices: list[str]) -> dict:
        # The gradients travel in the push to the storage device; the pull carries variables.
        compression = self.compression(config)
        return {"compression": compression_summary(compression, log, devices, "ps-push")}
