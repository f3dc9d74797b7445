"""How the planner predicts each strategy, and which of its configurations the what-if table
offers: one :class:`StrategyPlanning` per strategy, named by the strategy's definition
(``StrategyDefinition.planning``, a ``"module:NAME"`` the planner imports when it first plans
that strategy, so the definitions stay below the planner). A strategy derived from another
plans as its parent unless it names its own (docs/architecture/extending.md, "Adding a strategy").
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from workbench.config import RunConfig
from workbench.models import Sequential
from workbench.optim import Optimizer
from workbench.parallel.collectives.compression import parse_compression
from workbench.parallel.pipeline.schedules import SCHEDULE_NAMES
from workbench.planner.device_costs import DeviceCosts
from workbench.planner.mesh_step import MeshCosting, mesh_layout, mesh_step
from workbench.planner.sharded_step import sharded_step
from workbench.planner.step_programs import (
    StepPrograms,
    central_storage_step,
    hybrid_step,
    mirrored_step,
    model_parallel_step,
    one_device_step,
    parameter_server_step,
    pipeline_step,
    tensor_parallel_step,
)
from workbench.strategies import STRATEGIES
from workbench.strategies.options import (
    ZERO_STAGES,
    DataParallelOptions,
    HybridOptions,
    ModelParallelOptions,
    ParameterServerOptions,
    PipelineOptions,
    ShardedOptions,
)

ALLREDUCE_CHOICES = ("ring", "hierarchical-copy", "reduce-to-one")
# Gradient compression on the ring: 16-bit, sparse and low-rank (--compression values).
COMPRESSION_CHOICES = ("fp16", "topk:0.01", "powersgd:2")
MICROBATCH_CHOICES = (2, 4, 8)
SHARD_CHOICES = (1, 2)

Programs = Callable[[RunConfig, Sequential, Optimizer, DeviceCosts, Sequence[str]], StepPrograms]
# (the strategy's name, the fields every row shares, the device count) -> its what-if rows
Candidates = Callable[[str, dict[str, Any], int], Iterator[RunConfig]]


class PlanningError(ValueError):
    """A configuration the planner cannot predict (names the option and why)."""


@dataclass(frozen=True)
class StrategyPlanning:
    """``programs``: one step of a configuration as simulator programs on ``devices`` (in the
    strategy's rank order). ``candidates``: the configurations the what-if table predicts for
    ``devices`` devices (none: the strategy is predicted when asked, not offered)."""

    programs: Programs
    candidates: Candidates = lambda name, common, devices: iter(())


def planning_of(strategy: str) -> StrategyPlanning | None:
    """The planning ``strategy``'s definition names (or inherits), None if it names none."""
    source = getattr(STRATEGIES[strategy], "planning", None)
    if source is None:
        return None
    module, _, name = source.partition(":")
    return getattr(importlib.import_module(module), name)


def predicted_strategies() -> tuple[str, ...]:
    """Every registered strategy the planner predicts, in the registry's order."""
    return tuple(name for name in STRATEGIES.names() if planning_of(name) is not None)


def _step(
    builder: Callable[..., StepPrograms], config: RunConfig, *context: Any, **named: Any
) -> StepPrograms:
    """``builder``'s step: every step builder takes the model, the optimizer, the global batch,
    the dtype, the devices and the costs first (``context``: the model, optimizer, costs and
    devices a :data:`Programs` receives), then its strategy's own options (``named``: by
    name, such as ``accumulate``)."""
    model, optimizer, costs, devices, *options = context
    return builder(
        model, optimizer, config.batch_size, config.dtype, devices, costs, *options, **named
    )


def _bucket_bytes(config: RunConfig) -> int:
    return int(config.options_of(DataParallelOptions).bucket_mb * 2**20)


# one-device ---------------------------------------------------------------------------------


def _one_device(config, model, optimizer, costs, devices) -> StepPrograms:
    return one_device_step(
        model,
        optimizer,
        config.batch_size,
        config.dtype,
        devices[0],
        costs,
        accumulate=config.accumulate,
        recompute=config.recompute,
    )


def _single(name: str, common: dict, devices: int) -> Iterator[RunConfig]:
    yield RunConfig(strategy=name, **common)


ONE_DEVICE = StrategyPlanning(_one_device, _single)


# mirrored and multi-worker mirrored ---------------------------------------------------------


def _mirrored(config, model, optimizer, costs, devices) -> StepPrograms:
    strategy = STRATEGIES[config.strategy]
    # ``auto`` is the ring on CPUs; NCCL's all-reduce is a ring too (its large-message
    # algorithm within a host), over the links calibration measured.
    algorithm = strategy.algorithm(config, "cpu")
    algorithm = "ring" if algorithm == "nccl" else algorithm
    groups = None
    if algorithm == "hierarchical-copy" and costs.cluster is not None:
        groups = costs.cluster.hosts_of(devices)  # a described cluster's hosts
    elif algorithm == "hierarchical-copy":
        # The groups the run forms: by the workers' hosts (the even groups the strategy asks
        # for when they share one).
        addresses = [costs.device_addresses.get(device, "127.0.0.1:0") for device in devices]
        ranks = strategy.groups(config, addresses)
        groups = [[devices[rank] for rank in group] for group in ranks]
    compression = parse_compression(config.options_of(DataParallelOptions).compression)
    return _step(
        mirrored_step,
        config,
        model,
        optimizer,
        costs,
        devices,
        algorithm,
        groups,
        _bucket_bytes(config),
        compression,
        accumulate=config.accumulate,
        recompute=config.recompute,
    )


def _mirrored_candidates(name: str, common: dict, devices: int) -> Iterator[RunConfig]:
    if devices < 2:
        return
    for algorithm in ALLREDUCE_CHOICES:
        yield RunConfig(strategy=name, devices=devices, allreduce=algorithm, **common)
    for compression in COMPRESSION_CHOICES:
        yield RunConfig(
            strategy=name, devices=devices, allreduce="ring", compression=compression, **common
        )


MIRRORED = StrategyPlanning(_mirrored, _mirrored_candidates)
# Across hosts (--hosts): predicted when asked, on a described or calibrated cluster.
MULTI_WORKER_MIRRORED = StrategyPlanning(_mirrored)


# sharded ------------------------------------------------------------------------------------


def _sharded(config, model, optimizer, costs, devices) -> StepPrograms:
    options = config.options_of(ShardedOptions)
    bucket_bytes = int(options.bucket_mb * 2**20)
    return _step(
        sharded_step,
        config,
        model,
        optimizer,
        costs,
        devices,
        bucket_bytes,
        options.zero_stage,
        recompute=config.recompute,
        accumulate=config.accumulate,
    )


def _sharded_candidates(name: str, common: dict, devices: int) -> Iterator[RunConfig]:
    if devices < 2:
        return
    for stage in ZERO_STAGES:
        yield RunConfig(strategy=name, devices=devices, zero_stage=stage, **common)


SHARDED = StrategyPlanning(_sharded, _sharded_candidates)


# central storage ----------------------------------------------------------------------------


def _central_storage(config, model, optimizer, costs, devices) -> StepPrograms:
    compression = config.options_of(DataParallelOptions).compression
    if compression != "none":
        raise PlanningError(
            f"--compression {compression}: predicted for mirrored and "
            "multi-worker-mirrored all-reduces, not yet for central storage's pushes"
        )
    return _step(
        central_storage_step,
        config,
        model,
        optimizer,
        costs,
        devices,
        _bucket_bytes(config),
        accumulate=config.accumulate,
        recompute=config.recompute,
    )


def _replicated(name: str, common: dict, devices: int) -> Iterator[RunConfig]:
    if devices >= 2:
        yield RunConfig(strategy=name, devices=devices, **common)


CENTRAL_STORAGE = StrategyPlanning(_central_storage, _replicated)


# parameter servers --------------------------------------------------------------------------


def _parameter_server(config, model, optimizer, costs, devices) -> StepPrograms:
    workers, shards = devices[: config.devices], devices[config.devices :]
    return parameter_server_step(
        model,
        optimizer,
        config.batch_size,
        config.dtype,
        workers,
        shards,
        costs,
        config.options_of(ParameterServerOptions).ps_partition_min_bytes,
        synchronous=config.options_of(ParameterServerOptions).mode == "sync",
        accumulate=config.accumulate,
        recompute=config.recompute,
    )


def _parameter_server_candidates(name: str, common: dict, devices: int) -> Iterator[RunConfig]:
    if devices < 2:
        return
    for shards in SHARD_CHOICES:
        yield RunConfig(strategy=name, devices=devices, ps=shards, mode="sync", **common)
    # Async: no worker waits for another (its steps train on stale variables: see staleness).
    yield RunConfig(strategy=name, devices=devices, ps=1, mode="async", **common)


PARAMETER_SERVER = StrategyPlanning(_parameter_server, _parameter_server_candidates)


# model parallelism and pipelines ------------------------------------------------------------


def _model_parallel(config, *context) -> StepPrograms:
    placement = config.options_of(ModelParallelOptions).placement
    return _step(model_parallel_step, config, *context, placement, recompute=config.recompute)


# Beyond this many devices the what-if table leaves layer-wise splits to the mesh search
# (docs/guide/planning.md, "Searching the mesh"): model parallelism's greedy placer weighs
# every device for every node (a row would cost more than the rest of the table, and its
# placement leaves most devices idle), and hybrid's meshes are the search's tp=1 rows.
MESH_SEARCH_ONLY_ABOVE = 64


def _model_parallel_candidates(name: str, common: dict, devices: int) -> Iterator[RunConfig]:
    if devices <= MESH_SEARCH_ONLY_ABOVE:
        yield from _replicated(name, common, devices)


MODEL_PARALLEL = StrategyPlanning(_model_parallel, _model_parallel_candidates)


def _tensor_parallel(config, *context) -> StepPrograms:
    return _step(tensor_parallel_step, config, *context, recompute=config.recompute)


# Predicted when asked (``dtrain plan --strategy tensor-parallel``); the mesh search offers
# tensor-parallel degrees as a mesh axis.
TENSOR_PARALLEL = StrategyPlanning(_tensor_parallel)


def _pipeline(config, *context) -> StepPrograms:
    options = config.options_of(PipelineOptions)
    return _step(
        pipeline_step,
        config,
        *context,
        options.microbatches,
        options.schedule,
        recompute=config.recompute,
        virtual_stages=options.virtual_stages,
    )


def _pipeline_candidates(name: str, common: dict, devices: int) -> Iterator[RunConfig]:
    if devices < 2:
        return
    for schedule in SCHEDULE_NAMES:
        for microbatches in MICROBATCH_CHOICES:
            # Interleaving takes micro-batches in groups of the stages (Megatron's rule).
            if schedule != "interleaved-1f1b" or microbatches % devices == 0:
                yield _pipelined(name, common, devices, devices, microbatches, schedule)


def _pipelined(
    name: str, common: dict, devices: int, stages: int, microbatches: int, schedule: str
) -> RunConfig:
    """A pipeline or hybrid row: ``stages`` stages (``devices // stages`` replicas)."""
    return RunConfig(
        strategy=name,
        devices=devices,
        stages=stages,
        microbatches=microbatches,
        schedule=schedule,
        **common,
    )


PIPELINE = StrategyPlanning(_pipeline, _pipeline_candidates)


def _hybrid(config, *context) -> StepPrograms:
    options = config.options_of(HybridOptions)
    compression = parse_compression(options.compression)
    return _step(
        hybrid_step,
        config,
        *context,
        options.stages,
        options.microbatches,
        options.schedule,
        compression,
        recompute=config.recompute,
        virtual_stages=options.virtual_stages,
    )


def _hybrid_candidates(name: str, common: dict, devices: int) -> Iterator[RunConfig]:
    """Every mesh of at least 2 replicas x 2 stages that ``devices`` divides into, 1F1B with
    twice as many micro-batches as stages (a bubble of at most a third of the step): one row
    per mesh. Beyond ``MESH_SEARCH_ONLY_ABOVE`` devices the mesh search's ``tp=1`` rows are
    these meshes (with every schedule), so the table leaves them to it."""
    if devices > MESH_SEARCH_ONLY_ABOVE:
        return
    for stages in range(2, devices // 2 + 1):
        if devices % stages == 0:
            yield _pipelined(name, common, devices, stages, 2 * stages, "1f1b")


HYBRID = StrategyPlanning(_hybrid, _hybrid_candidates)


# the device mesh ----------------------------------------------------------------------------


def _mesh(config, model, optimizer, costs, devices) -> StepPrograms:
    # Every device plays its own program here (a run's own prediction, a few devices); the
    # what-if table's mesh search plays one pipeline at scale (workbench.planner.mesh_step).
    costing = MeshCosting(model, optimizer, config.dtype, costs, config.recompute)
    step = mesh_step(costing, mesh_layout(config), devices, every_device=True)
    return StepPrograms(step.programs, step.link, stage_devices=step.stage_devices)


# Predicted when asked; the what-if table's rows for it come from the mesh search
# (workbench.planner.mesh_search), which needs the model to prune.
MESH = StrategyPlanning(_mesh)
