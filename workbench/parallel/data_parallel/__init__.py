"""Data parallelism on the devices: a :class:`GradientWorker` computes gradients on its slice
of each global batch; a :class:`Replica` all-reduces them with its peers (or sends them to the
central storage device) and applies the identical update. The strategies ``mirrored``,
``central-storage`` and ``multi-worker-mirrored`` (``workbench.strategies``) plan them; the
parameter-server workers reuse the gradient worker.
"""

from workbench.parallel.data_parallel.gradient_worker import GradientWorker
from workbench.parallel.data_parallel.replica import Replica, ReplicaSpec

__all__ = ["GradientWorker", "Replica", "ReplicaSpec"]
