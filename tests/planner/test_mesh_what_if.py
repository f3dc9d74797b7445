"""The mesh search in the what-if table: mesh rows ranked with what each loses (the bubble, the
tensor group's all-reduces, the data group's), ``--what-if-top K`` cutting the table and its
JSON, a bad K refused by its flag, and a 1024-device described cluster ranked."""

import json

import pytest

from workbench.cli.main import main
from workbench.config import RunConfig
from workbench.models import build_model, transformer
from workbench.optim import make_optimizer
from workbench.planner.device_costs import described_costs
from workbench.planner.mesh_search import HOSTS, STAGES, mesh_space
from workbench.planner.what_if import gap_by_part, mesh_rows, rank_rows
from workbench.simulate import parse_cluster

OPTIMIZER = make_optimizer("sgd")
# Two hosts of two GPUs, a slow network between them.
SLOW_NETWORK = "hosts=2,gpus-per-host=2,intra=nvlink:300GB/s,inter=1Gb/s"


def ranked_mesh(spec: str, model, batch: int):
    cluster = parse_cluster(spec)
    base = RunConfig(batch_size=batch, hidden=(32, 32, 32), dataset="synthetic")
    rows = mesh_rows(
        base, model, OPTIMIZER, described_costs(cluster), cluster.size, cluster.devices
    )
    return rank_rows(rows)


def by_options(rows) -> dict[tuple, object]:
    return {tuple(sorted(row.options.items())): row for row in rows}


def test_mesh_rows_rank_with_what_each_loses_to_the_row_above():
    rows = ranked_mesh(SLOW_NETWORK, build_model("mlp", (64,), 10, (32, 32, 32)), 64)
    assert [row.rank for row in rows] == list(range(1, len(rows) + 1))
    steps = [row.step_seconds for row in rows]
    assert steps == sorted(steps)
    assert rows[0].reason == "fastest" and rows[0].versus_above == ""
    assert all(row.versus_above.startswith("+") for row in rows[1:])
    # Each part shows where its axis is: tensor all-reduces with tp, the data all-reduce with
    # dp, a bubble with stages; and the parts add up to the step.
    for row in rows:
        mesh = row.options["mesh"]
        assert (row.parts["tensor all-reduce"] > 0) == ("tp=1" not in mesh)
        assert (row.parts["data all-reduce"] > 0) == ("dp=1" not in mesh)
        assert sum(row.parts.values()) == pytest.approx(row.step_seconds, rel=1e-9)
    rows_by = by_options(rows)

    def row(mesh: str, **pipeline):
        return rows_by[tuple(sorted({"devices": 4, "mesh": mesh, **pipeline}.items()))]

    # Zero-bubble fills GPipe's bubble with its weight gradients: GPipe loses by bubble.
    gpipe = row("dp=1,tp=1,pp=4", microbatches=4, schedule="gpipe")
    zero = row("dp=1,tp=1,pp=4", microbatches=4, schedule="zero-bubble")
    assert zero.rank < gpipe.rank
    gap = gap_by_part(gpipe.parts, zero.parts)
    assert next(iter(gap)) == "bubble" and gap["bubble"] > 0
    # Across the slow network, four replicas' ring all-reduce loses to two replicas each
    # splitting its layers over a host's pair: the data all-reduce is what it loses by.
    data = row("dp=4,tp=1,pp=1")
    tensor = row("dp=2,tp=2,pp=1")
    assert tensor.rank < data.rank
    assert "data all-reduce +" in data.reason.split(": ", 1)[1].split(",")[0]


def test_a_1024_device_described_cluster_returns_a_ranked_mesh_table():
    model = transformer((8, 8), 10)
    spec = "dgx-h100,hosts=128"
    rows = ranked_mesh(spec, model, 8192)
    assert len(rows) > 50
    assert rows[0].reason == "fastest" and rows[-1].rank == len(rows)
    assert all(row.strategy == "mesh" and row.prediction is not None for row in rows)
    # One replica's pipeline stands for all: the timeline holds a stage device each.
    for row in rows[:5]:
        assert len(row.prediction.devices) == int(row.options["mesh"].split("pp=")[1])
    pruned = mesh_space(model, 8192, 1024, 8).pruned
    kinds = {p.kind for p in pruned}
    assert {HOSTS, STAGES} <= kinds


PLAN = [
    "plan",
    "--what-if-cluster",
    "dgx-h100,hosts=1,gpus-per-host=4",
    "--dataset",
    "synthetic:64:10:256",
    "--hidden",
    "16",
    "--batch-size",
    "64",
]


def test_what_if_top_cuts_the_table_and_the_json(capsys):
    assert main([*PLAN, "--what-if-top", "3", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    rows = document["configurations"]
    assert [row["rank"] for row in rows] == [1, 2, 3]
    assert document["top"] == 3 and document["ranked"] > 3
    assert rows[0]["reason"] == "fastest" and rows[0]["versus_above"] is None
    assert all(row["versus_above"].startswith("+") for row in rows[1:])
    # Two Dense layers: four stages are left out, with the kind of reason and the reason.
    left_out = {entry["mesh"]: entry for entry in document["meshes_left_out"]}
    assert left_out["dp=1,tp=1,pp=4"]["kind"] == STAGES
    assert "the model has 2" in left_out["dp=1,tp=1,pp=4"]["reason"]
    assert main([*PLAN, "--what-if-top", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("strategy"))
    assert len(lines) == header + 1 + 2 + 2  # two rows, then the left-out and memory lines
    assert f"showing the best 2 of {document['ranked']} ranked" in lines[-2]


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5"])
def test_a_bad_what_if_top_is_refused_by_its_flag(capsys, value):
    assert main([*PLAN, "--what-if-top", value]) == 2
    error = capsys.readouterr().err
    assert error.startswith("dtrain plan: error: --what-if-top") and "whole number >= 1" in error
