"""Model parallelism on the devices: :mod:`~workbench.parallel.model_parallel.graph` builds the
whole training graph with layers pinned to devices, places it and partitions it (Send/Recv on
every cut edge); :mod:`~workbench.parallel.model_parallel.device` runs one partition per device
each step, its Send/Recv meeting the peers' through a per-step rendezvous. The ``model-parallel``
strategy (``workbench.strategies.model_parallel``) plans them.
"""

from workbench.parallel.model_parallel.device import DeviceSpec, ModelParallelDevice
from workbench.parallel.model_parallel.graph import ModelParallelPlan, build_model_parallel_graph

__all__ = ["DeviceSpec", "ModelParallelDevice", "ModelParallelPlan", "build_model_parallel_graph"]
