"""The mesh search's space and its costing: which dp x tp x pp shapes a device count gives and
which are left out (with the reason), the pipelines each keeps, the rings priced in closed form
against the lock-step simulation, chunk figures scaled from two sizes against a build at the
size itself, one pipeline played against every device, and a device's parameter shard."""

import math

import numpy as np
import pytest

from workbench.config import RunConfig
from workbench.models import build_model, transformer
from workbench.optim import make_optimizer
from workbench.parallel.pipeline.mesh_stage import stage_plans
from workbench.planner.device_costs import described_costs
from workbench.planner.memory import predict_memory
from workbench.planner.mesh_rings import ring_seconds
from workbench.planner.mesh_search import (
    BATCH,
    HOSTS,
    INTERLEAVED,
    SPLIT,
    STAGES,
    mesh_space,
)
from workbench.planner.mesh_step import PROBE_ROWS, MeshCosting, mesh_layout, mesh_step
from workbench.simulate import parse_cluster, simulate
from workbench.simulate.lockstep_ring import simulate_ring
from workbench.strategies import validate_config

MLP = build_model("mlp", (64,), 10, (16, 16, 16))  # 4 Dense layers
TRANSFORMER = transformer((8, 8), 10)  # 4 attention heads, 7 layers
OPTIMIZER = make_optimizer("sgd")


def shapes(space) -> set[str]:
    return {str(candidate.mesh) for candidate in space.candidates}


def test_four_devices_keep_every_mesh_the_layers_and_a_host_allow():
    space = mesh_space(MLP, 64, 4, devices_per_host=2)
    assert shapes(space) == {
        "dp=1,tp=1,pp=4",
        "dp=1,tp=2,pp=2",
        "dp=2,tp=1,pp=2",
        "dp=2,tp=2,pp=1",
        "dp=4,tp=1,pp=1",
    }
    # tp=4 would cross hosts of 2 devices.
    assert {(str(p.mesh), p.kind) for p in space.pruned} == {("dp=1,tp=4,pp=1", HOSTS)}
    assert "2 devices per host" in space.pruned[0].reason


def test_eight_devices_leave_out_meshes_with_their_reasons():
    space = mesh_space(TRANSFORMER, 48, 8, devices_per_host=8)
    pruned = {str(p.mesh): p for p in space.pruned}
    # 8 stages for 7 layers; 8 tensor ranks for 4 heads.
    assert pruned["dp=1,tp=1,pp=8"].kind == STAGES
    assert "the model has 7" in pruned["dp=1,tp=1,pp=8"].reason
    assert pruned["dp=1,tp=8,pp=1"].kind == SPLIT
    assert "4 attention heads" in pruned["dp=1,tp=8,pp=1"].reason
    assert "dp=2,tp=4,pp=1" in shapes(space) and "dp=8,tp=1,pp=1" in shapes(space)
    assert not shapes(space) & set(pruned)
    odd = mesh_space(TRANSFORMER, 36, 8, devices_per_host=8)
    assert {str(p.mesh) for p in odd.pruned if p.kind == BATCH} == {
        "dp=8,tp=1,pp=1",
    }


def test_each_pipeline_gets_its_schedules_micro_batches_and_virtual_stages():
    space = mesh_space(MLP, 64, 4, devices_per_host=4)
    by_mesh: dict[str, list] = {}
    for candidate in space.candidates:
        by_mesh.setdefault(str(candidate.mesh), []).append(candidate)
    # One stage: no pipeline, one row.
    assert [(c.microbatches, c.schedule) for c in by_mesh["dp=4,tp=1,pp=1"]] == [(1, "1f1b")]
    two = by_mesh["dp=2,tp=1,pp=2"]
    # M in pp, 2pp, 4pp, 8pp dividing the replica's 32 rows; V x pp chunks within 4 layers.
    assert sorted({c.microbatches for c in two}) == [2, 4, 8, 16]
    assert {c.schedule for c in two} == {"gpipe", "1f1b", "zero-bubble", INTERLEAVED}
    assert {c.virtual_stages for c in two if c.schedule == INTERLEAVED} == {2}
    assert all(c.microbatches >= 4 for c in by_mesh["dp=1,tp=1,pp=4"])


@pytest.mark.parametrize("stride, ranks, nbytes", [(1, 8, 40_000), (2, 16, 12_345), (8, 4, 999)])
def test_closed_form_ring_equals_the_lockstep_simulation(stride, ranks, nbytes):
    cluster = parse_cluster("dgx-h100,hosts=4")
    devices = cluster.devices[::stride][:ranks]
    links = [cluster.link(devices[r], devices[(r + 1) % ranks]) for r in range(ranks)]
    chunk = math.ceil(math.ceil(nbytes / 4) / ranks)  # elements a rank sends a step
    played = simulate_ring(
        np.zeros(ranks),
        np.zeros(ranks),
        np.array([link.latency for link in links]),
        np.array([link.bandwidth for link in links]),
        np.full(ranks, chunk),
        4,
        10**9,
        1e-12,
    )
    assert ring_seconds(devices, nbytes, 4, cluster.link, 1e-12) == pytest.approx(
        played.finish.max(), rel=1e-12
    )


def test_chunk_figures_scaled_from_two_sizes_equal_a_build_at_the_size():
    costs = described_costs(parse_cluster("dgx-h100,hosts=1"))
    scaled = MeshCosting(TRANSFORMER, OPTIMIZER, "float32", costs)
    layers = range(2, 5)
    plan = scaled.plan(2, 2)
    micro = 7
    assert micro not in PROBE_ROWS
    built = scaled._cost(
        layers, 2, plan, scaled._measured(layers, 2, plan, micro, "host0/gpu0"), "host0/gpu0"
    )
    chunk = scaled.chunk(layers, 2, 2, micro, "host0/gpu0")
    for kind in "FBIW":
        assert chunk.of(kind).reduced == built.of(kind).reduced
        assert [s for s, _ in chunk.of(kind).segments] == pytest.approx(
            [s for s, _ in built.of(kind).segments], rel=1e-9
        )
    sizes = ("activation_bytes", "gradient_bytes", "kept_bytes", "input_bytes")
    assert [getattr(chunk, n) for n in sizes] == [getattr(built, n) for n in sizes]
    assert chunk.forward_peak == built.forward_peak
    assert chunk.backward_peak == built.backward_peak
    assert chunk.of("F").reduced  # the split chunk all-reduces forward


def test_one_pipeline_stands_for_every_device_on_alike_gpus():
    cluster = parse_cluster("hosts=2,gpus-per-host=4,intra=nvlink:300GB/s,inter=100Gb/s")
    costs = described_costs(cluster)
    costing = MeshCosting(MLP, OPTIMIZER, "float32", costs)
    for mesh, schedule in (("dp=2,tp=2,pp=2", "zero-bubble"), ("dp=8", "1f1b")):
        config = validate_config(
            RunConfig(
                strategy="mesh",
                devices=8,
                model="mlp",
                hidden=(16, 16, 16),
                dataset="synthetic",
                batch_size=64,
                mesh=mesh,
                microbatches=4,
                schedule=schedule,
            )
        )
        spans = []
        for every in (False, True):
            layout = mesh_layout(config)
            step = mesh_step(costing, layout, cluster.devices, every_device=every)
            assert len(step.programs) == (8 if every else layout.mesh.pp)
            spans.append(simulate(step.programs, step.link).makespan)
        assert spans[0] == pytest.approx(spans[1], rel=1e-9)


def test_a_mesh_device_keeps_its_stage_shard_of_the_parameters():
    config = validate_config(
        RunConfig(
            strategy="mesh",
            devices=4,
            model="mlp",
            hidden=(16, 16, 16),
            dataset="synthetic",
            batch_size=64,
            optimizer="momentum",
            mesh="dp=1,tp=2,pp=2",
            microbatches=4,
            schedule="1f1b",
        )
    )
    optimizer = make_optimizer("momentum")
    devices = [f"d{rank}" for rank in range(4)]
    held = predict_memory(config, MLP, optimizer, devices, described_costs(parse_cluster("laptop")))
    # Each stage's two tensor ranks hold its split parameters once between them and its
    # replicated ones each: the four devices hold the model plus one more replicated copy.
    plan = stage_plans(MLP, 2, 2)
    shapes = MLP.parameter_shapes()
    whole = sum(math.prod(shape) for shape in shapes.values()) * 4
    replicated = sum(math.prod(shapes[n]) for n, split in plan.items() if split.axis is None) * 4
    parameters = [held[device].by_category["parameters"] for device in devices]
    assert sum(parameters) == whole + replicated
    assert [held[d].by_category["optimizer"] for d in devices] == parameters  # momentum: one slot
    assert all(held[d].by_category["activations"] > 0 for d in devices)
