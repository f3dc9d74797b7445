"""The client graph a strategy's run is placed and partitioned from, without starting
anything: what ``dtrain plan`` prints and ``plan_view`` draws."""

from __future__ import annotations

from typing import Any

from workbench.config import ConfigError, RunConfig
from workbench.optim import make_optimizer
from workbench.strategies import STRATEGIES
from workbench.strategies.recomputation import check_recompute


def graph_plan(config: RunConfig, model: Any) -> Any:
    """The placed and partitioned client graph of ``config`` for ``model`` (it has
    ``describe()`` and ``partitioned``); a strategy whose devices build their own programs
    is refused, naming the ones that have a plan, and so is a model the strategy would refuse
    to train (a run's checks, before the plan)."""
    strategy = STRATEGIES[config.strategy]
    strategy.check_model(config, model)
    check_recompute(config, model)
    plan = strategy.graph_plan(config, model, make_optimizer(config.optimizer))
    if plan is None:
        raise ConfigError(
            "--strategy",
            f"{config.strategy} (with these options) has no client graph for the master to "
            "place: each device builds its own program. Plans exist for model-parallel, "
            "parameter-server, and mirrored or central-storage with --replication in-graph",
        )
    return plan
