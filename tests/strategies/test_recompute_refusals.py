"""``--recompute`` where a strategy's graph would keep every activation anyway is refused,
naming the flag, before anything starts."""

import pytest

from workbench.config import ConfigError, RunConfig
from workbench.models import mlp
from workbench.strategies.recomputation import check_recompute

MODEL = mlp((4,), 3, (8,))


@pytest.mark.parametrize("strategy", ["central-storage", "parameter-server"])
def test_in_graph_parameter_placements_refuse_recomputation(strategy):
    config = RunConfig(strategy=strategy, devices=2, replication="in-graph", recompute="full")
    with pytest.raises(ConfigError, match=r"--recompute.*in-graph"):
        check_recompute(config, MODEL)


def test_in_graph_mirrored_and_between_graph_recompute():
    for replication in ("in-graph", "between-graph"):
        config = RunConfig(
            strategy="mirrored", devices=2, replication=replication, recompute="full"
        )
        check_recompute(config, MODEL)
    check_recompute(RunConfig(strategy="parameter-server", devices=2, recompute="full"), MODEL)
