"""``dtrain calibrate`` and the calibration behind ``dtrain plan --what-if``: measure the
cluster at hand, or read its calibration from the run store's cache.

The live cluster is the one ``dtrain run`` would use: a local cluster of ``--devices`` workers
(or ``--cluster``). Its calibration times the model's training step at every batch size the
what-if table's configurations compute on (a replica's share, each micro-batch size) on every
device, the links between the devices, Dask's dispatch and the collectives the data-parallel
rows' runs time as their replicas run them; a one-device row is timed in this process, as a
one-device run trains here. Calibrations are cached per cluster in the run store: a second
plan of the same model on a local cluster finds all of it there, measures nothing and starts
no cluster. The measuring itself is :mod:`workbench.calibration`'s; this module decides what
the table needs, and it sits above the strategies because their options decide which
collectives a row's run times.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from workbench.calibration.collectives_probe import CENTRAL_KINDS, measure_collective
from workbench.calibration.probe import (
    calibrate_in_process,
    calibrate_session,
    covers,
    in_process_signature,
    session_signature,
)
from workbench.calibration.run_start import cached_local_calibration
from workbench.config import ConfigError, RunConfig
from workbench.costs import Calibration, collective_key
from workbench.data.catalog import dataset_signature
from workbench.ir import Graph
from workbench.launch.machine_limits import build_checked_model, check_local_devices
from workbench.models import Sequential
from workbench.optim import make_optimizer
from workbench.planner.device_costs import measured_costs
from workbench.planner.what_if import (
    MICROBATCH_CHOICES,
    candidate_configs,
)
from workbench.runtime.cluster import ClusterSession, start_run_cluster
from workbench.runtime.cluster_target import ClusterTarget
from workbench.runtime.devices import device_name
from workbench.store import RunStore
from workbench.strategies import STRATEGIES, validate_config
from workbench.strategies.data_parallel import DataParallel
from workbench.training.graphs import build_training_graph
from workbench.training.job import Progress


@dataclass(frozen=True)
class Calibrated:
    cluster: Calibration
    one_device: Calibration
    seconds: float  # what measuring cost now (about 0 when everything was cached)
    measured: bool = True  # False: all of it read from the run store, no cluster started


def what_if_batch_sizes(batch_size: int, devices: int) -> list[int]:
    """The batch sizes the what-if table's configurations compute on.

    Examples
    --------
    >>> what_if_batch_sizes(256, 2)
    [32, 64, 128, 256]
    """
    sizes = {batch_size, batch_size // devices}
    sizes |= {batch_size // m for m in MICROBATCH_CHOICES}
    # hybrid meshes: a replica's micro-batch
    for stages in range(2, devices // 2 + 1):
        if devices % stages == 0:
            sizes |= {batch_size // (devices // stages) // m for m in MICROBATCH_CHOICES}
    return sorted(size for size in sizes if size >= 1)


def model_for(config: RunConfig) -> Sequential:
    """The model ``config`` names, shaped for its data set."""
    input_shape, num_classes = dataset_signature(config.dataset, seed=config.seed)
    return build_checked_model(config, input_shape, num_classes, 1)


def calibrate_cluster(
    config: RunConfig,
    model: Sequential,
    progress: Progress,
    store: RunStore | None = None,
    fresh: bool = False,
) -> Calibrated:
    """Calibrate (or read the cache of) the cluster ``config`` names, for ``model``;
    ``fresh`` measures everything again and replaces the cache (``dtrain calibrate``: a
    calibration taken while the machine was busy would otherwise stay). A local cluster whose
    cached calibration has everything is not started."""
    target = ClusterTarget.of(config)
    if target.starts_its_own:
        check_local_devices(config)
    store = store or RunStore()
    optimizer = make_optimizer(config.optimizer)
    sizes = what_if_batch_sizes(config.batch_size, config.devices)
    graphs = [build_training_graph(model, optimizer, size, config.dtype).graph for size in sizes]
    started = time.perf_counter()
    kind = _kind(config)
    local = device_name(kind)
    signature = in_process_signature(local, kind)
    cached = None if fresh else _cached(store, signature)
    one_device = calibrate_in_process(graphs[-1:], local, kind, cached)
    if one_device is not cached:
        store.save_calibration(signature, one_device.to_json())
    if target.starts_its_own and not fresh:
        names = [device_name(kind, task=rank) for rank in range(config.devices)]
        known = cached_local_calibration(kind, names, store)
        if known is not None and _has_everything(known, config, model, names, graphs):
            seconds = time.perf_counter() - started
            return Calibrated(known, one_device, seconds, measured=one_device is not cached)
    progress(f"[calibrate] timing {len(sizes)} batch sizes on {config.devices} devices")
    with start_run_cluster(
        config, config.devices, config.device_type, progress=progress
    ) as session:
        signature = session_signature(session)
        known = None if fresh else _cached(store, signature)
        cluster = calibrate_session(
            session, graphs, known=known, stall_timeout=config.stall_timeout
        )
        cluster = _with_collectives(session, cluster, config, model)
        store.save_calibration(signature, cluster.to_json())
    return Calibrated(cluster, one_device, time.perf_counter() - started)


def _kind(config: RunConfig) -> str:
    return "gpu" if config.device_type == "gpu" else "cpu"


def _cached(store: RunStore, signature: str) -> Calibration | None:
    text = store.load_calibration(signature)
    return Calibration.from_json(text) if text else None


@dataclass(frozen=True)
class TimedCollective:
    """A collective a data-parallel run times as its replicas run it (see
    :mod:`workbench.calibration.collectives_probe`)."""

    kind: str  # an all-reduce algorithm, or central storage's reduce or broadcast
    groups: tuple[tuple[int, ...], ...]  # ranks, for a hierarchical all-reduce
    largest: int  # bytes: the run's largest bucket


def plan_collectives(
    config: RunConfig,
    model: Sequential,
    names: Sequence[str],
    addresses: Sequence[str],
    kind: str = "cpu",
) -> dict[str, TimedCollective]:
    """The collectives the runs of the table's data-parallel rows time at their start, by
    :func:`workbench.costs.collective_key`, as each run's strategy asks for them
    (``DataParallel._calibrated``): timed by the plan, a later run finds them cached."""
    wanted: dict[str, TimedCollective] = {}
    parameters = sum(math.prod(shape) for shape in model.parameter_shapes().values())
    for candidate in candidate_configs(config, len(names)):
        strategy = STRATEGIES[candidate.strategy]
        if not isinstance(strategy, DataParallel):
            continue
        try:
            candidate = validate_config(candidate)
        except ConfigError:
            continue
        if not strategy.times_its_collectives(candidate, kind):
            continue
        groups = strategy.groups(candidate, list(addresses))
        named = [[names[rank] for rank in group] for group in groups]
        kinds = (
            CENTRAL_KINDS if strategy.central_storage else (strategy.algorithm(candidate, kind),)
        )
        gradient_bytes = parameters * np.dtype(candidate.dtype).itemsize
        largest = min(strategy.bucket_bytes(candidate), gradient_bytes)
        for timed in kinds:
            wanted[collective_key(timed, names, named)] = TimedCollective(timed, groups, largest)
    return wanted


def _has_everything(
    known: Calibration,
    config: RunConfig,
    model: Sequential,
    names: Sequence[str],
    graphs: Sequence[Graph],
) -> bool:
    """Whether a cached calibration of the local cluster holds all the plan measures."""
    if not covers(known, names, graphs):
        return False
    addresses = [known.device_addresses.get(name, "") for name in names]
    if not all(addresses):
        return False
    wanted = plan_collectives(config, model, names, addresses, _kind(config))
    return all(known.has_measured(key) for key in wanted)


def _with_collectives(
    session: ClusterSession, calibration: Calibration, config: RunConfig, model: Sequential
) -> Calibration:
    """``calibration`` with the collectives of :func:`plan_collectives` it lacks, timed."""
    wanted = plan_collectives(
        config, model, session.device_names, session.addresses, session.device_type
    )
    missing = {key: timed for key, timed in wanted.items() if not calibration.has_measured(key)}
    if not missing:
        return calibration
    started = time.perf_counter()
    fits = {}
    for timed in missing.values():
        fits.update(
            measure_collective(
                session,
                timed.kind,
                timed.groups,
                timed.largest,
                stall_timeout=config.stall_timeout,
            )
        )
    measured = Calibration(
        calibration.signature,
        tuple(session.device_names),
        collectives=fits,
        measured_seconds=time.perf_counter() - started,
    )
    return calibration.merged(measured)


def run_calibration(
    config: RunConfig,
    plan: Calibration,
    graphs: Mapping[int, Graph],
    store: RunStore,
) -> Calibration:
    """The calibration a run of ``config`` on a local cluster predicts its step from, when
    it measures nothing at its start: the run store's for the run's own devices when that has
    all the run would time (a parameter-server run's workers and shards, once such a run has
    measured them), else the plan's (the run's own devices are the plan's, or the run has
    yet to measure its cluster). ``graphs``: the model's step by batch size."""
    strategy = STRATEGIES[config.strategy]
    kind = _kind(config)
    names = strategy.device_names(config, kind)
    if list(names) == list(plan.devices):
        return plan
    own = cached_local_calibration(kind, names, store)
    timed = [graphs[size] for size in strategy.device_batch_sizes(config) if size in graphs]
    if (
        own is not None
        and len(timed) == len(strategy.device_batch_sizes(config))
        and covers(own, names, timed, strategy.wires, strategy.link_sizes(config, kind))
    ):
        return own
    return plan


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
