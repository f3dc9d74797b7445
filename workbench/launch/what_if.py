"""``dtrain plan --what-if`` and ``dtrain calibrate``: measure the cluster at hand (or read a
described one), then predict every strategy for the run's model and batch.

The live cluster is the one ``dtrain run`` would use: a local cluster of ``--devices`` workers
(or ``--cluster``). Its calibration times the model's training step at every batch size the
table's configurations compute on (a replica's share, each micro-batch size) on every device,
the links between the devices and Dask's dispatch; a one-device row is timed in this process,
as a one-device run trains here. Calibrations are cached per cluster in the run store, so a
second plan of the same model measures nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from workbench.config import ConfigError, RunConfig
from workbench.costs import Calibration
from workbench.data import load_dataset
from workbench.launch.machine_limits import build_checked_model, check_local_devices
from workbench.models import Sequential
from workbench.optim import make_optimizer
from workbench.planner.device_costs import DeviceCosts, described_costs, measured_costs
from workbench.planner.what_if import MICROBATCH_CHOICES, WhatIfRow, rank_rows, what_if
from workbench.runtime.calibration_probe import (
    calibrate_in_process,
    calibrate_session,
    in_process_signature,
    session_signature,
)
from workbench.runtime.cluster import start_run_cluster
from workbench.runtime.cluster_target import ClusterTarget
from workbench.runtime.devices import device_name
from workbench.simulate import ClusterDescription, parse_cluster
from workbench.store import RunStore
from workbench.training.graphs import build_training_graph
from workbench.training.job import Progress


@dataclass(frozen=True)
class Calibrated:
    cluster: Calibration
    one_device: Calibration
    seconds: float  # what measuring cost now (0 when everything was cached)


def what_if_batch_sizes(batch_size: int, devices: int) -> list[int]:
    """The batch sizes the what-if table's configurations compute on.

    Examples
    --------
    >>> what_if_batch_sizes(256, 2)
    [32, 64, 128, 256]
    """
    sizes = {batch_size, batch_size // devices}
    sizes |= {batch_size // m for m in MICROBATCH_CHOICES}
    return sorted(size for size in sizes if size >= 1)


def model_for(config: RunConfig) -> Sequential:
    """The model ``config`` names, shaped for its data set."""
    dataset = load_dataset(config.dataset, seed=config.seed)
    return build_checked_model(config, dataset.input_shape, dataset.num_classes, 1)


def calibrate_cluster(
    config: RunConfig,
    model: Sequential,
    progress: Progress,
    store: RunStore | None = None,
    fresh: bool = False,
) -> Calibrated:
    """Calibrate (or read the cache of) the cluster ``config`` names, for ``model``;
    ``fresh`` measures everything again and replaces the cache (``dtrain calibrate``: a
    calibration taken while the machine was busy would otherwise stay)."""
    if ClusterTarget.of(config).starts_its_own:
        check_local_devices(config)
    store = store or RunStore()
    optimizer = make_optimizer(config.optimizer)
    sizes = what_if_batch_sizes(config.batch_size, config.devices)
    graphs = [build_training_graph(model, optimizer, size, config.dtype).graph for size in sizes]
    started = time.perf_counter()
    kind = "gpu" if config.device_type == "gpu" else "cpu"
    local = device_name(kind)
    signature = in_process_signature(local, kind)
    cached = None if fresh else _cached(store, signature)
    one_device = calibrate_in_process(graphs[-1:], local, kind, cached)
    store.save_calibration(signature, one_device.to_json())
    progress(f"[calibrate] timing {len(sizes)} batch sizes on {config.devices} devices")
    with start_run_cluster(
        config, config.devices, config.device_type, progress=progress
    ) as session:
        signature = session_signature(session)
        known = None if fresh else _cached(store, signature)
        cluster = calibrate_session(
            session, graphs, known=known, stall_timeout=config.stall_timeout
        )
        store.save_calibration(signature, cluster.to_json())
    return Calibrated(cluster, one_device, time.perf_counter() - started)


def _cached(store: RunStore, signature: str) -> Calibration | None:
    text = store.load_calibration(signature)
    return Calibration.from_json(text) if text else None


@dataclass(frozen=True)
class WhatIfPlan:
    rows: list[WhatIfRow]
    source: str  # where the costs came from, for the heading
    devices: int


def plan_what_if(config: RunConfig, cluster_text: str | None, progress: Progress) -> WhatIfPlan:
    """The ranked table for ``config``'s model and batch: on the described cluster
    ``cluster_text`` (``--what-if-cluster``) or on the live one, calibrated."""
    model = model_for(config)
    optimizer = make_optimizer(config.optimizer)
    if cluster_text is not None:
        try:
            cluster = parse_cluster(cluster_text)
        except ValueError as error:
            raise ConfigError("--what-if-cluster", str(error)) from None
        return _described(config, model, optimizer, cluster)
    calibrated = calibrate_cluster(config, model, progress)
    progress(f"[calibrate] measured in {calibrated.seconds:.2f} s (cached parts reused)")
    costs = measured_costs(calibrated.cluster)
    rows = what_if(config, model, optimizer, costs, config.devices)
    one = what_if(
        config.replace(devices=1), model, optimizer, measured_costs(calibrated.one_device), 1
    )
    # The one-device row as it trains: in this process, timed here.
    rows = [row for row in rows if row.strategy != "one-device"] + one
    source = f"calibrated on {config.devices} local devices ({costs.source})"
    return WhatIfPlan(rank_rows(rows), source, config.devices)


def _described(
    config: RunConfig, model: Sequential, optimizer, cluster: ClusterDescription
) -> WhatIfPlan:
    costs: DeviceCosts = described_costs(cluster)
    rows = what_if(
        config,
        model,
        optimizer,
        costs,
        cluster.size,
        cluster.devices,
        cluster.device.memory_capacity_bytes,
    )
    source = (
        f"described: {cluster.name}, {cluster.hosts} hosts x {cluster.devices_per_host} "
        f"{cluster.device.name}"
    )
    return WhatIfPlan(rows, source, cluster.size)


def calibration_summary(calibrated: Calibrated) -> dict:
    """What ``dtrain calibrate`` prints: what was timed and the figures that matter most."""
    cluster = calibrated.cluster
    links = measured_costs(cluster)
    return {
        "signature": cluster.signature,
        "devices": len(cluster.devices),
        "op_signatures": sum(len(times) for times in cluster.op_seconds.values()),
        "peer_link": f"{links.default_peer.latency * 1e6:.0f} us + "
        f"{links.default_peer.bandwidth / 1e9:.2f} GB/s",
        "rpc_link": f"{links.default_rpc.latency * 1e6:.0f} us + "
        f"{links.default_rpc.bandwidth / 1e9:.2f} GB/s",
        "dispatch_ms": round(cluster.dispatch_seconds * 1e3, 3),
        "add_gb_per_s": round(links.add_bytes_per_second / 1e9, 2),
        "seconds_measuring": round(calibrated.seconds, 3),
    }
