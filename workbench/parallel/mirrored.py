"""``mirrored``: TF's ``MirroredStrategy`` on Dask workers.

Variables are mirrored on every device; gradients are all-reduced with ``--allreduce``:
``ring`` (the NCCL-style default), ``hierarchical-copy`` (reduce in two groups, ring between
the group leaders, broadcast back) or ``reduce-to-one`` (one device sums and broadcasts).
"""

from __future__ import annotations

from workbench.parallel.data_parallel import DataParallelStrategy


class MirroredStrategy(DataParallelStrategy):
    name = "mirrored"
