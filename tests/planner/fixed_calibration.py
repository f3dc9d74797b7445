"""A fixed calibration of a small model on a local 2-device cluster (and of the 3-device
cluster a parameter-server run starts, and of this process), written into a run store as
``dtrain plan --what-if`` and the runs would have cached it: literal numbers, nothing timed."""

from __future__ import annotations

from pathlib import Path

from workbench.calibration.exchange_probe import EXCHANGE_KINDS
from workbench.calibration.probe import (
    TRANSFER_SIZES,
    WIRES,
    cluster_signature,
    in_process_signature,
)
from workbench.config import RunConfig
from workbench.costs import Calibration, LinkFit, collective_key, link_key, op_signature
from workbench.costs.op_costs import graph_signature
from workbench.launch.calibrate import model_for, what_if_batch_sizes
from workbench.optim import make_optimizer
from workbench.runtime.devices import device_name
from workbench.store import RunStore
from workbench.training.graphs import build_training_graph

SMALL = ["--dataset", "synthetic:32:4:512", "--hidden", "16", "--batch-size", "64"]
CONFIG = RunConfig(dataset="synthetic:32:4:512", hidden=(16,), batch_size=64, devices=2)
WORKERS = [device_name("cpu", task=rank) for rank in range(2)]
PS_DEVICES = [*WORKERS, device_name("cpu", task=0, job="ps")]


def _calibration(
    devices: list[str], wires: tuple[str, ...], slower: float, host: str = "host"
) -> Calibration:
    model = model_for(CONFIG)
    optimizer = make_optimizer(CONFIG.optimizer)
    graphs = [
        build_training_graph(model, optimizer, size, CONFIG.dtype).graph
        for size in what_if_batch_sizes(CONFIG.batch_size, CONFIG.devices)
    ]
    times = {}
    for graph in graphs:
        for node in graph.nodes:
            if node.op not in ("placeholder", "constant"):
                times[op_signature(graph, node)] = slower * (2e-6 + 1e-9 * len(times))
    links = {
        link_key(source, destination, wire): LinkFit(4e-5 * slower, 2e9 / slower)
        for source in devices
        for destination in devices
        if source != destination
        for wire in wires
    }
    return Calibration(
        signature=cluster_signature("cpu", devices, ["127.0.0.1"] * len(devices)),
        devices=tuple(devices),
        op_seconds={device: dict(times) for device in devices},
        links=links,
        link_sizes=TRANSFER_SIZES if len(devices) > 1 else (),
        add_bytes_per_second=dict.fromkeys(devices, 4e9),
        step_overhead_seconds=dict.fromkeys(devices, 1e-4),
        step_variation={device: {graph_signature(g): 0.05 for g in graphs} for device in devices},
        dispatch_seconds=2e-3,
        device_hosts=dict.fromkeys(devices, host),
        host_cores={host: 2.0},
        device_addresses={d: f"tcp://127.0.0.1:{40000 + i}" for i, d in enumerate(devices)},
    )


def cluster_calibration(with_collectives: bool = True) -> Calibration:
    """The 2-device cluster's, as a plan leaves it (its runs' collectives timed)."""
    calibration = _calibration(WORKERS, WIRES, 1.0)
    if with_collectives:
        # Two devices on one host: hierarchical-copy's two groups hold one device each.
        keys = [
            collective_key("ring", WORKERS),
            collective_key("hierarchical-copy", WORKERS, [[WORKERS[0]], [WORKERS[1]]]),
            collective_key("reduce-to-one", WORKERS),
            collective_key("reduce", WORKERS),
            collective_key("broadcast", WORKERS),
        ]
        for key in keys:
            calibration.collectives[key] = LinkFit(1.5e-4, 1.2e9)
    return calibration


def parameter_server_calibration() -> Calibration:
    """The 3-device cluster of a parameter-server run (2 workers, 1 shard), as the run leaves
    it: slower nodes and links than the plan's cluster, its exchange timed."""
    calibration = _calibration(PS_DEVICES, ("rpc", "peer"), 1.3)
    for kind in EXCHANGE_KINDS:
        calibration.collectives[collective_key(kind, PS_DEVICES)] = LinkFit(3e-4, 8e8)
    calibration.compute_stretch[collective_key("ps-exchange", PS_DEVICES)] = 1.4
    return calibration


def in_process_calibration() -> Calibration:
    local = device_name("cpu")
    base = _calibration([local], (), 0.8)
    return Calibration(
        **{**base.__dict__, "signature": in_process_signature(local, "cpu"), "links": {}}
    )


def write_cache(root: Path, *calibrations: Calibration) -> RunStore:
    store = RunStore(root)
    for calibration in calibrations:
        store.save_calibration(calibration.signature, calibration.to_json())
    return store
