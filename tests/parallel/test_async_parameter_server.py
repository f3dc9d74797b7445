"""Asynchronous parameter servers learn, and a staleness bound holds on every applied update."""

import pytest

from workbench.config import RunConfig
from workbench.launch.runner import run_training

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("bound", [None, 1])
def test_async_reaches_95_percent_and_respects_the_bound(bound, no_leftover_processes):
    config = RunConfig(
        strategy="parameter-server", devices=2, ps=2, mode="async", staleness=bound, epochs=10
    )
    result = run_training(config, progress=lambda _: None)
    assert result.summary["test_accuracy"] >= 0.95
    staleness = result.summary["staleness"]
    recorded = [event.value for event in result.log.scalars("staleness")]
    # One recorded staleness per worker step (the max over the shards it pushed to).
    assert staleness["updates"] == 2 * result.summary["steps"] == len(recorded)
    assert sum(staleness["histogram"].values()) == staleness["updates"]
    # Asynchronous means the workers did not run in lock step: some update was computed from
    # parameters another worker had updated since the read. All zeros would be synchronous
    # training under another name.
    assert any(value > 0 for value in recorded), staleness["histogram"]
    assert staleness["max"] >= 1 and staleness["mean"] > 0
    if bound is not None:
        assert staleness["max"] <= bound
        assert all(value <= bound for value in recorded)
