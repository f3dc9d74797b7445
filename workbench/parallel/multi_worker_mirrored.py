"""``multi-worker-mirrored``: TF's ``MultiWorkerMirroredStrategy``: mirrored variables across
several hosts, with a hierarchical all-reduce: reduce inside each host (fast local links), ring
across the hosts' leaders (the slow network), broadcast back inside each host.

Hosts are groups of workers: the real hosts of the cluster when it spans several, otherwise
``--hosts`` simulated hosts of consecutive workers on this machine.
"""

from __future__ import annotations

from workbench.parallel.data_parallel import DataParallelStrategy


class MultiWorkerMirroredStrategy(DataParallelStrategy):
    name = "multi-worker-mirrored"

    def algorithm(self) -> str:
        return "hierarchical-copy"

    def group_count(self) -> int:
        return self.config.hosts
