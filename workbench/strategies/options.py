"""The strategies' options: the rows (flag, type, default, allowed values, help) and, per
strategy, the frozen dataclass that types them.

A row is the whole truth about an option as users give it; which strategies accept it
follows from their ``options``; ``dtrain run --help`` says so per flag. The dataclasses are
how code reads a validated run's options (``config.options_of(PipelineOptions).stages``): each
strategy's definition names its class (``options_type``), whose fields are exactly its rows'
names (the definition is refused where it is written otherwise), and validation builds it
once from the checked values. They live here, beside the rows, rather than in the
definitions' modules, so that the planner and the front ends read a run's options without
importing the engine the definitions drive.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from workbench.config import Option, StrategyOptions
from workbench.parallel.collectives import ALLREDUCE_ALGORITHMS
from workbench.parallel.collectives.compression import COMPRESSION_FORMS, canonical_compression
from workbench.parallel.mesh import canonical_mesh
from workbench.parallel.parameter_server import PARAMETER_SERVER_MODES, REPLICATION_NAMES
from workbench.parallel.pipeline import SCHEDULE_NAMES

# ``auto``: NCCL on GPU devices (TF MirroredStrategy's default there), ring on CPUs.
ALLREDUCE = Option(
    "allreduce",
    str,
    "auto",
    "all-reduce algorithm (auto: nccl on GPUs, ring on CPUs)",
    choices=("auto", *ALLREDUCE_ALGORITHMS, "nccl"),
    noun="all-reduce algorithm",
    label="all-reduce",
)
BUCKET_MB = Option(
    "bucket_mb",
    float,
    25.0,
    "gradient fusion bucket size in MiB",
    minimum=0.001,
    label="bucket MiB",
)
# A value with a format (``topk:0.01``), so no ``choices``: the converter canonicalises it and
# ``validate_config`` refuses a malformed one (``float16`` is kept as fp16's old name).
COMPRESSION = Option(
    "compression",
    str,
    "none",
    "gradient compression: fp16/bf16 on the wire with dynamic loss scaling, top-k with error "
    f"feedback, PowerSGD rank r ({COMPRESSION_FORMS})",
    parse=canonical_compression,
)
HOSTS = Option("hosts", int, 2, "simulated hosts (groups of workers on one machine)", minimum=1)
PS = Option("ps", int, 1, "parameter-server shards", minimum=1, label="PS shards")
MODE = Option("mode", str, "sync", "update mode", choices=PARAMETER_SERVER_MODES)
STALENESS = Option(
    "staleness",
    int,
    None,
    "bound on update staleness in async mode (default: unbounded)",
    minimum=0,
    optional=True,
    applies_with="--mode async",
)
REPLICATION = Option(
    "replication",
    str,
    "between-graph",
    "in-graph: one client graph holding every replica's tower; between-graph: each worker "
    "builds its own replica graph",
    choices=REPLICATION_NAMES,
)
# TF's min_max_variable_partitioner: a variable of at least this many bytes is split along
# its first axis over the PS shards (each part at least this big, at most one part a shard).
PS_PARTITION_MIN_BYTES = Option(
    "ps_partition_min_bytes",
    int,
    None,
    "split variables of at least this many bytes along their first axis over the PS shards "
    "(default: never split)",
    minimum=0,
    optional=True,
    label="partition min bytes",
)
STAGES = Option("stages", int, 2, "pipeline stages", minimum=1)
# Megatron's tensor-parallel degree: ranks each layer pair is split over.
TP = Option(
    "tp",
    int,
    2,
    "tensor-parallel ranks each Dense pair, attention and embedding is split over (--devices)",
    minimum=1,
    label="TP",
)
MICROBATCHES = Option(
    "microbatches", int, 4, "micro-batches per global batch", minimum=1, label="micro-batches"
)
SCHEDULE = Option("schedule", str, "gpipe", "pipeline schedule", choices=SCHEDULE_NAMES)
# Megatron's virtual pipeline stages: model chunks per device (docs/guide/distributed-training.md).
VIRTUAL_STAGES = Option(
    "virtual_stages",
    int,
    2,
    "model chunks per device for interleaved-1f1b (device s holds chunks s, s+P, ...)",
    minimum=1,
    applies_with="--schedule interleaved-1f1b",
    label="virtual stages",
)
# A value with a format (``dp=2,tp=2,pp=1``), so no ``choices``: the converter canonicalises it
# and the mesh strategy's check refuses a malformed one (the Python API skips the converter).
MESH = Option(
    "mesh",
    str,
    "dp=2,tp=2,pp=1",
    "device mesh: data-parallel replicas x tensor-parallel ranks x pipeline stages, "
    "e.g. dp=2,tp=2,pp=2 (an axis left out is 1; the product is --devices)",
    parse=canonical_mesh,
)
ELASTIC = Option(
    "elastic",
    bool,
    False,
    "go on with fewer devices when a failed one is not replaced (same global batch)",
)
BACKUP_WORKERS = Option(
    "backup_workers",
    int,
    0,
    "each step applies the first N-B gradients and drops the rest (sync mode)",
    minimum=0,
    applies_with="--mode sync",
    label="backup workers",
)
# The placements of ``workbench.parallel.model_parallel.graph.PLACEMENTS``, named here because
# that package imports the device side, which the flag parser must not wait for.
PLACEMENT = Option(
    "placement",
    str,
    "greedy",
    "who places the graph: greedy (the cost model, with the costs the run measured), "
    "balanced-params (contiguous layer groups balanced by parameter count), manual (the "
    "model's device constraints)",
    choices=("greedy", "balanced-params", "manual"),
)

# ZeRO's stages (Rajbhandari et al. 2020): what each replica keeps only its shard of. 3 is
# PyTorch FSDP's FULL_SHARD, its default; 2 is SHARD_GRAD_OP.
ZERO_STAGES = (1, 2, 3)
ZERO_STAGE = Option(
    "zero_stage",
    int,
    3,
    "what each replica keeps only its 1/N shard of: 1 optimizer state, 2 also gradients, "
    "3 also parameters (gathered before each bucket's forward and backward, freed after)",
    minimum=1,
    label="ZeRO stage",
)


# The values of the rows with ``choices``, as types (the strategy tests check they agree).
AllReduceName = Literal["auto", "ring", "hierarchical-copy", "reduce-to-one", "nccl"]
ReplicationName = Literal["in-graph", "between-graph"]
ModeName = Literal["sync", "async"]
ScheduleName = Literal["gpipe", "1f1b", "interleaved-1f1b", "zero-bubble"]
PlacementName = Literal["greedy", "balanced-params", "manual"]


@dataclass(frozen=True)
class NoOptions(StrategyOptions):
    """A strategy without options (``one-device``)."""


@dataclass(frozen=True)
class DataParallelOptions(StrategyOptions):
    """What every synchronous data-parallel strategy takes (the family's code reads these)."""

    bucket_mb: float
    compression: str  # canonical (``fp16``, ``topk:0.01``, ...; ``none``)


@dataclass(frozen=True)
class MirroredOptions(DataParallelOptions):
    allreduce: AllReduceName
    elastic: bool
    replication: ReplicationName


@dataclass(frozen=True)
class CentralStorageOptions(DataParallelOptions):
    replication: ReplicationName


@dataclass(frozen=True)
class MultiWorkerMirroredOptions(DataParallelOptions):
    hosts: int
    elastic: bool


@dataclass(frozen=True)
class ShardedOptions(StrategyOptions):
    """``sharded``: a ZeRO stage and its buckets (the shard of each is the ring chunk a rank
    owns after the bucket's reduce-scatter)."""

    bucket_mb: float
    zero_stage: int


@dataclass(frozen=True)
class ParameterServerOptions(StrategyOptions):
    ps: int
    mode: ModeName
    staleness: int | None
    replication: ReplicationName
    backup_workers: int
    ps_partition_min_bytes: int | None
    compression: str


@dataclass(frozen=True)
class PipelineOptions(StrategyOptions):
    stages: int
    microbatches: int
    schedule: ScheduleName
    virtual_stages: int


@dataclass(frozen=True)
class HybridOptions(PipelineOptions):
    compression: str


@dataclass(frozen=True)
class MeshOptions(StrategyOptions):
    """``mesh``: the mesh's shape (canonical ``dp=A,tp=B,pp=C``) and its pipeline's
    micro-batches, schedule and virtual stages."""

    mesh: str
    microbatches: int
    schedule: ScheduleName
    virtual_stages: int


@dataclass(frozen=True)
class TensorParallelOptions(StrategyOptions):
    """``tensor-parallel``: the ranks the layers are split over (``--tp``, as ``--devices``)."""

    tp: int


@dataclass(frozen=True)
class ModelParallelOptions(StrategyOptions):
    placement: PlacementName
