"""Asynchronous parameter servers learn, and a staleness bound holds on every applied update."""

import pytest

from workbench.config import RunConfig
from workbench.launch.runner import run_training


@pytest.mark.parametrize("bound", [None, 1])
def test_async_reaches_95_percent_and_respects_the_bound(bound, no_leftover_processes):
    config = RunConfig(
        strategy="parameter-server", devices=2, ps=2, mode="async", staleness=bound, epochs=10
    )
    result = run_training(config, progress=lambda _: None)
    assert result.summary["test_accuracy"] >= 0.95
    staleness = result.summary["staleness"]
    # One recorded staleness per worker step (the max over the shards it pushed to).
    assert staleness["updates"] == 2 * result.summary["steps"]
    if bound is not None:
        assert staleness["max"] <= bound
        assert all(event.value <= bound for event in result.log.scalars("staleness"))
