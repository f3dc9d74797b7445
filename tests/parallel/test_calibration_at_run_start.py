"""A run times its devices before it plans, caches what it measured per cluster, reports the
step the planner predicted beside the step it measured, and ``--no-calibrate`` measures
nothing."""

import pytest

from workbench.calibration.probe import time_graph_nodes
from workbench.config import RunConfig
from workbench.costs import STAGE_HANDOFF, TENSOR_ALLREDUCE, Calibration, collective_key
from workbench.launch.runner import run_training
from workbench.models import build_model
from workbench.optim import make_optimizer
from workbench.store import RunStore
from workbench.training.graphs import build_training_graph

RUN = dict(
    strategy="mirrored",
    devices=2,
    dataset="synthetic:32:4:512",
    hidden=(32,),
    batch_size=64,
    steps=30,
)


def calibrations(root) -> list[Calibration]:
    folder = root / "calibrations"
    return [Calibration.from_json(p.read_text()) for p in sorted(folder.glob("*.json"))]


@pytest.mark.integration
def test_a_run_reports_its_predicted_step_and_caches_its_calibration(store_root):
    lines: list[str] = []
    first = run_training(RunConfig(**RUN), progress=lines.append).summary
    assert first["predicted_step_ms"] > 0 and first["measured_step_ms"] > 0
    assert first["calibration_seconds"] > 0
    (cached,) = calibrations(store_root)
    assert len(cached.devices) == 2
    assert cached.links and cached.dispatch_seconds > 0
    assert all(cached.op_seconds[device] for device in cached.devices)
    assert all(cached.step_variation[device] for device in cached.devices)
    # The run's own all-reduce, timed as its replicas run it (the ring, on these 2 devices).
    assert list(cached.collectives) == [collective_key("ring", list(cached.devices))]
    assert any(line.startswith("[plan] predicted step") for line in lines)

    # The same cluster and model again: everything is cached, nothing is measured anew.
    again: list[str] = []
    second = run_training(RunConfig(**RUN), progress=again.append).summary
    assert second["calibration_seconds"] == 0
    (reused,) = calibrations(store_root)
    assert reused.measured_seconds < cached.measured_seconds + 0.01
    assert reused.links == cached.links and reused.collectives == cached.collectives


@pytest.mark.integration
def test_a_mesh_run_times_its_tensor_groups_and_hand_offs_as_its_devices_run_them(store_root):
    """On tp=2 x pp=2 each stage's two tensor ranks sum their partial results inside every
    forward and backward, both groups at once, each rank computing before each sum; and
    each tensor rank hands its micro-batches to the same tensor rank of the next stage: each
    is timed so, and the prediction plays these times instead of the ring's messages."""
    mesh = {"strategy": "mesh", "devices": 4, "mesh": "dp=1,tp=2,pp=2", "hidden": (32, 32, 32)}
    run = RunConfig(**{**RUN, **mesh})
    result = run_training(run, progress=lambda line: None)
    (cached,) = calibrations(store_root)
    d = list(cached.devices)
    groups = [[d[0], d[1]], [d[2], d[3]]]
    handoffs = [[d[0], d[2]], [d[2], d[0]], [d[1], d[3]], [d[3], d[1]]]
    assert set(cached.collectives) == {
        collective_key(TENSOR_ALLREDUCE, group) for group in groups
    } | {collective_key(STAGE_HANDOFF, pair) for pair in handoffs}
    for fit in cached.collectives.values():
        assert 0 <= fit.latency < 1.0 and fit.bandwidth > 0
    # Stage 1's tensor all-reduces take their measured time: no ring chunk on the wire.
    reduced = result.prediction.timeline.of(d[2], "allreduce")
    measured = cached.collectives[collective_key(TENSOR_ALLREDUCE, groups[1])]
    sums = [i for i in reduced if i.kind == "compute"]
    assert sums and not any(i.sent for i in reduced)
    assert all(i.duration >= measured.latency for i in sums)


@pytest.mark.integration
def test_no_calibrate_measures_nothing_and_predicts_nothing_without_a_cache(store_root):
    summary = run_training(RunConfig(**RUN, no_calibrate=True), progress=lambda line: None).summary
    assert "predicted_step_ms" not in summary
    assert not (store_root / "calibrations").exists()
    assert RunStore(store_root).runs() == []


def test_every_node_of_a_training_step_is_timed_at_its_shapes():
    model = build_model("mlp", (32,), 4, (16,))
    graph = build_training_graph(model, make_optimizer("adam"), 8, "float32").graph
    timing = time_graph_nodes(graph, repeats=2)
    times = timing.node_seconds
    assert timing.overhead_seconds >= 0 and timing.variation >= 0 and timing.median_seconds > 0
    assert any(signature.startswith("matmul(8x32:float32,32x16") for signature in times)
    assert any(signature.startswith("apply_adam(") for signature in times)
    assert all(seconds >= 0 for seconds in times.values())


@pytest.mark.integration
def test_a_parameter_server_run_times_its_workers_pulls_and_pushes(store_root):
    """Each worker's pulls and pushes, all workers calling the shards at once, are timed
    before the first step and cached for the planner."""
    run = RunConfig(**{**RUN, "strategy": "parameter-server", "ps": 1})
    summary = run_training(run, progress=lambda line: None).summary
    assert summary["predicted_step_ms"] > 0
    (cached,) = calibrations(store_root)
    devices = list(cached.devices)
    assert len(devices) == 3
    assert set(cached.collectives) == {
        collective_key("ps-pull", devices),
        collective_key("ps-push", devices),
    }
    for fit in cached.collectives.values():
        # A pull or push of the MLP's shard takes its RPC's fixed cost and more.
        assert 0 < fit.latency < 1.0 and fit.bandwidth > 0


@pytest.mark.integration
def test_a_hybrid_run_times_its_mesh_exchanges_as_its_stages_run_them(store_root):
    """On a 2 x 2 mesh each stage averages with the same stage of the other replica, both
    groups at the same moment, and hands its micro-batches to its neighbour while the other
    stages compute: each is timed so, and the prediction plays these times instead of the
    ring's messages and the idle links."""
    run = RunConfig(**{**RUN, "strategy": "hybrid", "devices": 4, "stages": 2, "hidden": (32, 32)})
    result = run_training(run, progress=lambda line: None)
    (cached,) = calibrations(store_root)
    d = list(cached.devices)
    groups = [[d[0], d[2]], [d[1], d[3]]]
    handoffs = [[d[0], d[1]], [d[1], d[0]], [d[2], d[3]], [d[3], d[2]]]
    assert set(cached.collectives) == {collective_key("ring", group) for group in groups} | {
        collective_key(STAGE_HANDOFF, pair) for pair in handoffs
    }
    for fit in cached.collectives.values():
        assert 0 <= fit.latency < 1.0 and fit.bandwidth > 0
    reduced = [i for i in result.prediction.timeline.intervals if i.phase == "allreduce"]
    # The measured time, not the ring's chunks on the wire (only the meeting's empty notes).
    assert any(i.kind == "compute" and i.label == "allreduce" for i in reduced)
    assert not any(i.sent for i in reduced)
    # An activation from stage 0 to stage 1 takes the hand-off's time, not the idle link's.
    sent = [i for i in result.prediction.timeline.of(d[0], "send") if i.sent]
    handoff = cached.collectives[collective_key(STAGE_HANDOFF, [d[0], d[1]])]
    put = sent[0].sent / handoff.bandwidth
    # A put is CPU work: where more of the 4 devices compute than the host has cores at that
    # moment (which the measured times decide), it is stretched, at most to devices / cores.
    stretch = max(1.0, len(d) / min(cached.host_cores.values()))
    assert put * (1 - 1e-6) <= sent[0].duration <= put * stretch * (1 + 1e-6)
