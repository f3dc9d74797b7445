"""``mirrored``: TF's ``MirroredStrategy`` on Dask workers.

Variables are mirrored on every device; gradients are all-reduced with ``--allreduce``:
``ring`` (the NCCL-style default), ``hierarchical-copy`` (reduce in two groups, ring between
the group leaders, broadcast back) or ``reduce-to-one`` (one device sums and broadcasts).
"""

from __future__ import annotations

from workbench.config import RunConfig
from workbench.strategies.data_parallel import DataParallel
from workbench.strategies.options import ALLREDUCE, BUCKET_MB, COMPRESSION


class Mirrored(DataParallel):
    name = "mirrored"
    description = "sync data parallel on one host: variables mirrored, gradients all-reduced"
    options = (ALLREDUCE, BUCKET_MB, COMPRESSION)

    def algorithm(self, config: RunConfig) -> str:
        return config.allreduce

    def compression(self, config: RunConfig) -> str:
        return config.compression
