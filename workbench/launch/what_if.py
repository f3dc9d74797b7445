"""``dtrain plan --what-if``: predict every strategy for the run's model and batch, on the
cluster at hand, calibrated (:mod:`workbench.launch.calibrate`), or on a described
one.

Each row is predicted from the calibration its run reads
(:func:`~workbench.launch.calibrate.run_calibration`), by the same call the run
makes (:func:`workbench.launch.runner.predicted_figures`), so a run that finds everything
cached reports the row's step as its prediction.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from workbench.config import ConfigError, RunConfig
from workbench.costs import Calibration
from workbench.launch.calibrate import (
    calibrate_cluster,
    model_for,
    run_calibration,
    what_if_batch_sizes,
)
from workbench.models import Sequential
from workbench.optim import make_optimizer
from workbench.planner.device_costs import DeviceCosts, described_costs, measured_costs
from workbench.planner.mesh_search import PrunedMesh, mesh_space
from workbench.planner.what_if import (
    WhatIfRow,
    rank_rows,
    what_if,
)
from workbench.runtime.cluster_target import ClusterTarget
from workbench.simulate import ClusterDescription, parse_cluster
from workbench.store import RunStore
from workbench.strategies.recomputation import check_recompute
from workbench.training.graphs import build_training_graph
from workbench.training.job import Progress


@dataclass(frozen=True)
class WhatIfPlan:
    rows: list[WhatIfRow]
    source: str  # where the costs came from, for the heading
    devices: int
    # Each device's memory the rows were judged against (None: not given, nothing marked).
    memory_capacity: int | None = None
    # The meshes the search left out, each with its reason.
    pruned: tuple[PrunedMesh, ...] = ()
    top: int | None = None  # --what-if-top: how many ranked rows the views show


def plan_what_if(
    config: RunConfig,
    cluster_text: str | None,
    progress: Progress,
    memory_per_device: int | None = None,
    top: int | None = None,
) -> WhatIfPlan:
    """The ranked table for ``config``'s model and batch: on the described cluster
    ``cluster_text`` (``--what-if-cluster``) or on the live one, calibrated. Rows whose
    largest device's predicted peak exceeds ``memory_per_device`` bytes
    (``--memory-per-device``; a described cluster's devices' own memory when not given) are
    marked as not fitting. ``top`` (``--what-if-top``): how many ranked rows the views show
    (the plan keeps them all)."""
    if top is not None and top < 1:
        raise ConfigError("--what-if-top", f"{top}: show at least 1 configuration")
    model = model_for(config)
    check_recompute(config, model)
    optimizer = make_optimizer(config.optimizer)
    if cluster_text is not None:
        try:
            cluster = parse_cluster(cluster_text)
        except ValueError as error:
            raise ConfigError("--what-if-cluster", str(error)) from None
        plan = _described(config, model, optimizer, cluster, memory_per_device)
        space = mesh_space(model, config.batch_size, cluster.size, cluster.devices_per_host)
        return replace(plan, pruned=space.pruned, top=top)
    store = RunStore()
    calibrated = calibrate_cluster(config, model, progress, store)
    if calibrated.measured:
        progress(f"[calibrate] measured in {calibrated.seconds:.2f} s (cached parts reused)")
    else:
        progress(f"[calibrate] cached calibration of {config.devices} devices: nothing measured")
    costs = measured_costs(calibrated.cluster)
    rows = what_if(
        config,
        model,
        optimizer,
        costs,
        config.devices,
        costs_for=_run_costs(config, model, calibrated.cluster, costs, store),
    )
    one = what_if(
        config.replace(devices=1), model, optimizer, measured_costs(calibrated.one_device), 1
    )
    # The one-device row as it trains: in this process, timed here.
    rows = [row for row in rows if row.strategy != "one-device"] + one
    source = f"calibrated on {config.devices} local devices ({costs.source})"
    pruned = mesh_space(model, config.batch_size, config.devices, None).pruned
    return WhatIfPlan(
        rank_rows(rows, memory_per_device),
        source,
        config.devices,
        memory_per_device,
        pruned if config.devices > 1 else (),
        top,
    )


def _run_costs(
    config: RunConfig,
    model: Sequential,
    plan: Calibration,
    plan_costs: DeviceCosts,
    store: RunStore,
) -> Callable[[RunConfig], DeviceCosts]:
    """Each row's costs: those of the calibration its run reads (:func:`run_calibration`)."""
    optimizer = make_optimizer(config.optimizer)
    sizes = what_if_batch_sizes(config.batch_size, config.devices)
    graphs = {
        size: build_training_graph(model, optimizer, size, config.dtype).graph for size in sizes
    }
    by_signature = {plan.signature: plan_costs}

    def costs_for(candidate: RunConfig) -> DeviceCosts:
        if not ClusterTarget.of(candidate).starts_its_own:
            return plan_costs
        calibration = run_calibration(candidate, plan, graphs, store)
        if calibration.signature not in by_signature:
            by_signature[calibration.signature] = measured_costs(calibration)
        return by_signature[calibration.signature]

    return costs_for


def _described(
    config: RunConfig,
    model: Sequential,
    optimizer,
    cluster: ClusterDescription,
    memory_per_device: int | None,
) -> WhatIfPlan:
    costs: DeviceCosts = described_costs(cluster)
    capacity = memory_per_device or cluster.device.memory_capacity_bytes
    rows = what_if(config, model, optimizer, costs, cluster.size, cluster.devices, capacity)
    source = (
        f"described: {cluster.name}, {cluster.hosts} hosts x {cluster.devices_per_host} "
        f"{cluster.device.name}"
    )
    return WhatIfPlan(rows, source, cluster.size, capacity)
