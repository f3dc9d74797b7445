"""Parameter servers: variables sharded over PS tasks, workers pull, compute, push.

``client_graph`` is the one graph the master places and partitions (variables and updates on
the shards, towers on the workers; its Send/Recv pairs are the pulls and pushes);
``protocol`` is the sans-IO shard state machine (sync / async / bounded staleness, duplicate
pushes ignored) that schedules the shards' programs; ``partitioner`` balances variables (or
their parts) over shards; ``messages`` is what pulls and pushes carry (row-sparse, compressed);
``shard_service`` runs a shard on a Dask worker; ``worker_loop`` is a worker's
pull-compute-push step; the strategy's definition in ``workbench.strategies.parameter_server``
drives them from the client.
"""

from workbench.parallel.parameter_server.partitioner import partition_variables
from workbench.parallel.parameter_server.protocol import (
    ApplyUpdate,
    IgnoreDuplicate,
    Pull,
    Push,
    SendParameters,
    ShardProtocol,
)

PARAMETER_SERVER_MODES = ("sync", "async")
# between-graph: each worker reads its own shard of the data; in-graph: the client feeds them.
REPLICATION_NAMES = ("in-graph", "between-graph")

__all__ = [
    "PARAMETER_SERVER_MODES",
    "REPLICATION_NAMES",
    "ApplyUpdate",
    "IgnoreDuplicate",
    "Pull",
    "Push",
    "SendParameters",
    "ShardProtocol",
    "partition_variables",
]
