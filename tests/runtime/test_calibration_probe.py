"""Timing a training step's nodes needs every optimizer's slots, shaped as the optimizer
makes them (Adam's step count is a scalar)."""

from __future__ import annotations

import pytest

from workbench.costs import op_signature
from workbench.models import mlp
from workbench.optim import make_optimizer
from workbench.runtime.calibration_probe import time_graph_nodes
from workbench.training.graphs import build_training_graph


@pytest.mark.parametrize("optimizer", ["sgd", "momentum", "adam"])
def test_every_node_of_a_training_step_is_timed_whatever_the_optimizer(optimizer):
    graph = build_training_graph(mlp((8,), 3, (4,)), make_optimizer(optimizer), 5, "float64").graph
    times, overhead = time_graph_nodes(graph, repeats=2)
    timed = {op_signature(graph, n) for n in graph.nodes if n.op not in ("placeholder", "constant")}
    assert set(times) == timed and overhead >= 0
    assert any(signature.startswith(f"apply_{optimizer}(") for signature in times)
