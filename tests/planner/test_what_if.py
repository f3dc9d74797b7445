"""The what-if table on described clusters: every strategy predicted, ranked, each loser with
its reason; the command line prints it (or JSON) and refuses a bad cluster by its flag."""

import json

import pytest

from workbench.cli.main import main
from workbench.config import RunConfig
from workbench.models import build_model
from workbench.optim import make_optimizer
from workbench.planner.device_costs import described_costs
from workbench.planner.what_if import format_table, what_if
from workbench.simulate import parse_cluster

MODEL = build_model("mlp", (784,), 10, (512, 512))
OPTIMIZER = make_optimizer("momentum")


def table(spec: str, batch: int = 256, capacity: int | None = None):
    cluster = parse_cluster(spec)
    capacity = cluster.device.memory_capacity_bytes if capacity is None else capacity
    return what_if(
        RunConfig(batch_size=batch),
        MODEL,
        OPTIMIZER,
        described_costs(cluster),
        cluster.size,
        cluster.devices,
        capacity,
    )


def test_every_strategy_is_ranked_fastest_first_with_a_reason_for_each_loser():
    rows = table("dgx-h100,hosts=1,gpus-per-host=2")
    predicted = [row for row in rows if row.prediction is not None]
    steps = [row.step_seconds for row in predicted]
    assert steps == sorted(steps)
    assert predicted[0].reason == "fastest"
    assert all(
        row.reason.startswith("+")
        and set(row.behind_ms)
        <= {
            "compute",
            "communication",
            "tensor all-reduce",
            "data all-reduce",
            "bubble",
            "overhead",
        }
        for row in predicted[1:]
    )
    strategies = {row.strategy for row in predicted}
    assert strategies == {
        "one-device",
        "mirrored",
        "sharded",
        "central-storage",
        "parameter-server",
        "model-parallel",
        "pipeline",
        "mesh",
    }


def test_a_model_with_fewer_layers_than_stages_lists_why_it_cannot_be_pipelined():
    rows = table("dgx-h100,hosts=1")  # 8 devices, 3 layers
    refused = {row.strategy: row.reason for row in rows if row.prediction is None}
    assert "layers" in refused["pipeline"]
    # Greedy placement splits nodes, not layers: model parallelism still has a prediction.
    assert "model-parallel" not in refused


def test_configurations_that_do_not_fit_in_memory_lose_to_memory():
    rows = table("dgx-h100,hosts=1,gpus-per-host=2", capacity=1_000)
    assert all(row.reason.startswith("memory") for row in rows if row.prediction is not None)


def test_at_scale_hierarchical_beats_a_flat_ring_on_a_small_gradient():
    # 2.7 MB of gradients over 64 devices: a flat ring pays 2 x 63 latencies of the slow
    # inter-host links, hierarchical pays only the 8 hosts' ring.
    rows = {
        row.options.get("allreduce"): row.step_seconds
        for row in table("dgx-h100,hosts=8", batch=8192)
        if row.strategy == "mirrored"
    }
    assert rows["hierarchical-copy"] < rows["ring"] < rows["reduce-to-one"]


def test_the_printed_table_has_a_line_per_configuration():
    rows = table("dgx-h100,hosts=1,gpus-per-host=2")
    text = format_table(rows)
    assert len(text.splitlines()) == len(rows) + 1
    assert "fastest" in text


def test_plan_what_if_json_gives_each_configuration_its_predicted_step(capsys):
    code = main(
        [
            "plan",
            "--what-if-cluster",
            "dgx-a100,hosts=2",
            "--dataset",
            "synthetic",
            "--batch-size",
            "1024",
            "--json",
        ]
    )
    assert code == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["source"].startswith("described: dgx-a100")
    rows = [row for row in printed["configurations"] if row["predicted_step_ms"] is not None]
    assert {row["strategy"] for row in rows} >= {"mirrored", "parameter-server", "one-device"}
    for row in rows:
        assert row["predicted_step_ms"] > 0 and row["devices"] >= 1
    allreduces = {row["allreduce"] for row in rows if row["strategy"] == "mirrored"}
    assert allreduces == {"ring", "hierarchical-copy", "reduce-to-one"}


@pytest.mark.parametrize(
    ("spec", "named"),
    [("dgx-h100,hosts=zero", "hosts"), ("dgx-h100,intra=fast", "intra"), ("dgx-h900", "preset")],
)
def test_a_bad_described_cluster_is_refused_naming_the_flag(capsys, spec, named):
    assert main(["plan", "--what-if-cluster", spec, "--dataset", "synthetic"]) == 2
    error = capsys.readouterr().err
    assert "--what-if-cluster" in error and named in error


def test_a_four_device_table_offers_every_hybrid_mesh_with_its_prediction():
    rows = table("dgx-h100,hosts=1,gpus-per-host=4")
    hybrid = [row for row in rows if row.strategy == "hybrid"]
    # 2 replicas x 2 stages is the one mesh of 4 devices: 1F1B, 4 micro-batches.
    assert [(row.options["stages"], row.options["microbatches"]) for row in hybrid] == [(2, 4)]
    assert hybrid[0].prediction is not None and hybrid[0].step_seconds > 0
    # Its step has both axes: the stages' activations and the stage all-reduces.
    timeline = hybrid[0].prediction.timeline
    assert {"allreduce", "update"} <= {interval.phase for interval in timeline.intervals}
    assert any(interval.kind == "send" for interval in timeline.intervals)
