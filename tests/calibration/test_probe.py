"""Timing a training step's nodes needs every optimizer's slots, shaped as the optimizer
makes them (Adam's step count is a scalar)."""

from __future__ import annotations

import pytest

from workbench.calibration import probe
from workbench.calibration.probe import time_graph_nodes
from workbench.costs import op_signature
from workbench.models import mlp
from workbench.optim import make_optimizer
from workbench.training.graphs import build_training_graph


@pytest.mark.parametrize("optimizer", ["sgd", "momentum", "adam"])
def test_every_node_of_a_training_step_is_timed_whatever_the_optimizer(optimizer):
    graph = build_training_graph(mlp((8,), 3, (4,)), make_optimizer(optimizer), 5, "float64").graph
    timing = time_graph_nodes(graph, repeats=2)
    times = timing.node_seconds
    timed = {op_signature(graph, n) for n in graph.nodes if n.op not in ("placeholder", "constant")}
    assert set(times) == timed and timing.overhead_seconds >= 0
    assert any(signature.startswith(f"apply_{optimizer}(") for signature in times)


def test_a_cheap_graph_is_timed_more_often_within_its_budget_and_reports_its_spread(
    monkeypatch,
):
    graph = build_training_graph(mlp((8,), 3, (4,)), None, 5, "float64").graph
    hooked_runs = []

    class CountingClock(probe._NodeClock):
        def __init__(self, *args):
            hooked_runs.append(args)
            super().__init__(*args)

    monkeypatch.setattr(probe, "_NodeClock", CountingClock)
    once = time_graph_nodes(graph, repeats=2)
    assert len(hooked_runs) == 2
    budgeted = time_graph_nodes(graph, repeats=2, budget_seconds=1.0)
    assert len(hooked_runs) == 2 + probe.MAX_REPEATS
    assert 0 <= once.variation < 5 and 0 <= budgeted.variation < 5
